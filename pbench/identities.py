"""Identities drawn by seeded code: names, birth dates, home towns and employers (stage 01).

The generator writes prose about people; this module owns the facts it writes about. A
region table maps each country of the shipped personas to a faker locale with Latin-script
names and to a few real towns (faker's ``city()`` invents places, so it is never used for
them). ``persona_facts`` reads what a persona text says (age, gender, place, retired,
student); ``draw_identity`` draws the rest, seeded by the run's seed and the person's id,
and lets the persona's own words win where they say something.
"""

from __future__ import annotations

import datetime as dt
import random
import re
import unicodedata
from dataclasses import dataclass, field
from functools import lru_cache

from faker import Faker


@dataclass(frozen=True)
class Region:
    """One country: its faker locale, real towns, and the words that name it in a persona."""

    country: str
    locale: str
    cities: tuple[str, ...]
    aliases: tuple[str, ...] = ()
    # A place a persona names that is not a town of the table (a state, a county): the town used for it.
    areas: dict[str, str] = field(default_factory=dict)
    # Romanized names for locales whose faker names are not in Latin script: (male, female, last).
    names: tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]] | None = None


_ARABIC = (("Omar", "Youssef", "Karim", "Tarek", "Hassan", "Mahmoud", "Amr", "Khaled", "Mostafa", "Ibrahim"),
           ("Nour", "Mariam", "Salma", "Yasmin", "Aya", "Hana", "Dina", "Rania", "Layla", "Mona"),
           ("Hassan", "Mansour", "Farouk", "Saleh", "Nasser", "Haddad", "Abdelrahman", "Fathy", "Kamal", "Sabry"))

REGIONS: dict[str, Region] = {r.country: r for r in [
    Region("United Kingdom", "en_GB", ("Manchester", "Leeds", "Birmingham", "Glasgow", "Edinburgh", "Bristol", "Sheffield",
                                        "Liverpool", "Nottingham", "York"),
           ("England", "Scotland", "Wales", "United Kingdom", "UK"),
           {"North Yorkshire": "Thirsk", "Scottish Borders": "Hawick"}),
    Region("Kenya", "en_KE", ("Nairobi", "Mombasa", "Kisumu", "Nakuru", "Eldoret", "Kericho")),
    Region("Japan", "ja_JP", ("Tokyo", "Osaka", "Kyoto", "Sapporo", "Fukuoka", "Nagoya", "Yokohama"), (),
           {"Hokkaido": "Obihiro"}),
    Region("Canada", "en_CA", ("Toronto", "Ottawa", "Montreal", "Winnipeg", "Vancouver", "Calgary")),
    Region("United States", "en_US", ("Chicago", "Memphis", "Sacramento", "Portland", "Denver", "Atlanta", "Madison",
                                      "New York"),
           ("United States", "USA"),
           {"Wisconsin": "Eau Claire", "Colorado": "Leadville", "Iowa": "Storm Lake", "Georgia, United States": "Vidalia"}),
    Region("Spain", "es_ES", ("Madrid", "Seville", "Barcelona", "Valencia", "Bilbao", "Malaga")),
    Region("Ghana", "tw_GH", ("Accra", "Kumasi", "Tamale", "Takoradi", "Cape Coast")),
    Region("Mexico", "es_MX", ("Monterrey", "Oaxaca", "Mexico City", "Guadalajara", "Puebla")),
    Region("Poland", "pl_PL", ("Gdansk", "Krakow", "Warsaw", "Wroclaw", "Poznan")),
    Region("Australia", "en_AU", ("Melbourne", "Canberra", "Sydney", "Brisbane", "Perth", "Atherton"), (),
           {"Wheatbelt": "Merredin"}),
    Region("Nigeria", "en_NG", ("Lagos", "Abuja", "Ibadan", "Enugu", "Kano")),
    Region("Denmark", "da_DK", ("Copenhagen", "Aarhus", "Odense", "Aalborg", "Herning"), (), {"Jutland": "Herning"}),
    Region("Turkey", "tr_TR", ("Istanbul", "Ankara", "Izmir", "Bursa")),
    Region("Norway", "no_NO", ("Bergen", "Tromso", "Oslo", "Trondheim", "Stavanger")),
    Region("India", "en_IN", ("Pune", "Mumbai", "Delhi", "Bangalore", "Chennai", "Kochi"), (), {"Kerala": "Kochi"}),
    Region("Ireland", "en_IE", ("Dublin", "Cork", "Galway", "Limerick", "Donegal")),
    Region("South Africa", "zu_ZA", ("Johannesburg", "Cape Town", "Durban", "Pretoria")),
    Region("New Zealand", "en_NZ", ("Auckland", "Wellington", "Christchurch", "Hamilton")),
    Region("Philippines", "en_PH", ("Cebu City", "Quezon City", "Manila", "Davao City"), (),
           {"Cebu": "Cebu City", "Bohol": "Tagbilaran"}, (  # faker's en_PH names are American ones
        ("Jose", "Juan", "Paolo", "Carlo", "Rogelio", "Ramon", "Jerome", "Rodel", "Arnel", "Joel"),
        ("Maria", "Kristine", "Rosario", "Angelica", "Mylene", "Marites", "Jocelyn", "Lorna", "Divina", "Camille"),
        ("Santos", "Reyes", "Cruz", "Bautista", "Ocampo", "Garcia", "Mendoza", "Villanueva", "Aquino", "Ramos",
         "Castillo", "Navarro"))),
    Region("Germany", "de_DE", ("Frankfurt", "Hamburg", "Berlin", "Munich", "Cologne")),
    Region("Italy", "it_IT", ("Naples", "Bologna", "Rome", "Milan", "Turin")),
    Region("South Korea", "ko_KR", ("Seoul", "Busan", "Daegu", "Incheon", "Daejeon"), (), {}, (
        ("Min-jun", "Ji-hoon", "Seo-jun", "Hyun-woo", "Dong-hyun", "Jae-won", "Sung-min", "Tae-yang"),
        ("Seo-yeon", "Ji-woo", "Min-seo", "Ha-eun", "Soo-ah", "Ye-jin", "Eun-ji", "Da-eun"),
        ("Kim", "Lee", "Park", "Choi", "Jung", "Kang", "Cho", "Yoon", "Jang", "Lim", "Han", "Shin"))),
    Region("Cote d'Ivoire", "fr_FR", ("Abidjan", "Soubre", "Bouake", "Yamoussoukro", "San-Pedro"), (),
           {"Western Region": "Soubre"}),
    Region("Portugal", "pt_PT", ("Porto", "Lisbon", "Braga", "Coimbra")),
    Region("Uganda", "en_KE", ("Kampala", "Entebbe", "Gulu", "Jinja")),
    Region("Argentina", "es_AR", ("Buenos Aires", "Cordoba", "Rosario", "Mendoza")),
    Region("Egypt", "fr_DZ", ("Cairo", "Alexandria", "Giza"), (), {}, _ARABIC),
    Region("Vietnam", "vi_VN", ("Hanoi", "Ho Chi Minh City", "Da Nang", "Hai Phong")),
    Region("Peru", "es_MX", ("Cusco", "Lima", "Arequipa", "Trujillo")),
    Region("Georgia", "ka_GE", ("Tbilisi", "Batumi", "Kutaisi"), (), {}, (
        ("Giorgi", "Davit", "Levan", "Nika", "Irakli", "Luka", "Sandro", "Tornike"),
        ("Nino", "Mariam", "Ana", "Tamar", "Salome", "Elene", "Natia", "Ketevan"),
        ("Beridze", "Kapanadze", "Gelashvili", "Maisuradze", "Lomidze", "Tsiklauri", "Abashidze", "Kvaratskhelia"))),
    Region("Bangladesh", "en_BD", ("Dhaka", "Chittagong", "Khulna", "Sylhet"), (), {}, (
        ("Rahim", "Tanvir", "Arif", "Sakib", "Imran", "Fahim", "Rafiq", "Nayeem"),
        ("Nusrat", "Farzana", "Sadia", "Tahmina", "Sharmin", "Ayesha", "Nabila", "Rumana"),
        ("Rahman", "Hossain", "Ahmed", "Islam", "Chowdhury", "Akter", "Uddin", "Sarkar"))),
    Region("Netherlands", "nl_NL", ("Rotterdam", "Amsterdam", "Utrecht", "The Hague", "Eindhoven")),
    Region("United Arab Emirates", "fr_DZ", ("Dubai", "Abu Dhabi", "Sharjah"), ("UAE",), {}, _ARABIC),
    Region("Indonesia", "id_ID", ("Jakarta", "Surabaya", "Bandung", "Yogyakarta")),
    Region("Chile", "es_CL", ("Santiago", "Valparaiso", "Antofagasta", "Concepcion"), (), {"Atacama": "Antofagasta"}),
    Region("Brazil", "pt_BR", ("Sao Paulo", "Rio de Janeiro", "Belo Horizonte", "Salvador", "Curitiba")),
    Region("Pakistan", "en_PK", ("Faisalabad", "Lahore", "Karachi", "Islamabad")),
    Region("Tanzania", "sw", ("Zanzibar City", "Dar es Salaam", "Arusha", "Dodoma"), (), {"Zanzibar": "Zanzibar City"}),
    Region("Belgium", "nl_BE", ("Brussels", "Antwerp", "Ghent", "Liege")),
    Region("Uruguay", "es_AR", ("Montevideo", "Salto", "Paysandu")),
    Region("France", "fr_FR", ("Lyon", "Paris", "Marseille", "Bordeaux", "Toulouse", "Bergerac"), (),
           {"Dordogne": "Bergerac"}),
    Region("Ethiopia", "am_ET", ("Addis Ababa", "Bahir Dar", "Hawassa", "Mekelle"), (), {}, (
        ("Dawit", "Abebe", "Yonas", "Tesfaye", "Bereket", "Henok", "Samuel", "Mulugeta"),
        ("Hana", "Selam", "Meron", "Tigist", "Bethlehem", "Liya", "Mahlet", "Saba"),
        ("Tesfaye", "Bekele", "Girma", "Haile", "Alemu", "Tadesse", "Kebede", "Mengistu"))),
    Region("Sweden", "sv_SE", ("Stockholm", "Gothenburg", "Malmo", "Uppsala")),
    Region("Morocco", "fr_DZ", ("Casablanca", "Rabat", "Marrakesh", "Fez"), (), {}, _ARABIC),
    Region("Cuba", "es_MX", ("Havana", "Holguin", "Camaguey", "Cienfuegos")),
    Region("Switzerland", "de_CH", ("Zurich", "Geneva", "Basel", "Bern")),
    Region("Greece", "el_GR", ("Athens", "Thessaloniki", "Patras", "Heraklion"), (), {}, (
        ("Giorgos", "Nikos", "Kostas", "Dimitris", "Yannis", "Panagiotis", "Christos", "Vasilis"),
        ("Maria", "Eleni", "Katerina", "Sofia", "Georgia", "Dimitra", "Ioanna", "Vasiliki"),
        ("Papadopoulos", "Georgiou", "Nikolaou", "Karagiannis", "Vlachos", "Oikonomou", "Makris", "Pappas"))),
    Region("Romania", "ro_RO", ("Sighetu Marmatiei", "Cluj-Napoca", "Bucharest", "Baia Mare"), (),
           {"Maramures": "Sighetu Marmatiei"}),
    Region("Colombia", "es_CO", ("Medellin", "Bogota", "Cali", "Barranquilla")),
    Region("Finland", "fi_FI", ("Helsinki", "Tampere", "Turku", "Oulu")),
]}

# Names that are placeholders, not people: redrawn when drawn, flagged when found.
PLACEHOLDER = re.compile(
    r"\b(john|jane)\s+(doe|smith)\b|\bdoe\b|\(\s*\d+\s*\)|\d|\b(person|user|member|friend|colleague|neighbour|"
    r"resident|customer|name|unknown|anonymous|test|example|placeholder|n/?a)\b", re.I)
TITLES = re.compile(r"^(mr|mrs|ms|miss|dr|prof|rev|sir|madam|chief|owura|quý ông|cô|bà|ông|drg|öğr)\.?\s", re.I)
REDRAW = re.compile(r"\b(doe|smith)\b", re.I)  # common placeholder surnames: never drawn


def is_placeholder(name: str) -> bool:
    """A name that stands for nobody: John/Jane Doe, "(2)" suffixes, "Person 3", a single word."""
    return bool(PLACEHOLDER.search(name)) or len(name.split()) < 2 or bool(TITLES.match(name))


def is_latin(text: str) -> bool:
    return all(not c.isalpha() or "LATIN" in unicodedata.name(c, "") for c in text)


# --------------------------------------------------------------------------- persona reading


@dataclass(frozen=True)
class PersonaFacts:
    """What a persona text says about a person; None where it says nothing."""

    age: int | None = None
    gender: str | None = None  # "female" or "male"
    country: str | None = None
    city: str | None = None
    origin_country: str | None = None  # "originally from ...", "grew up in ..."
    origin_city: str | None = None
    retired: bool | None = None
    student: bool | None = None
    self_employed: bool | None = None


@lru_cache(maxsize=1)
def _place_patterns() -> list[tuple[re.Pattern, str, str | None]]:
    """(pattern, country, town or None), longest phrase first so 'Georgia, United States' beats 'Georgia'."""
    rows: list[tuple[str, str, str | None]] = []
    for r in REGIONS.values():
        rows += [(c, r.country, c) for c in r.cities]
        rows += [(a, r.country, t) for a, t in r.areas.items()]
        rows += [(a, r.country, None) for a in (r.country, *r.aliases)]
    rows.sort(key=lambda row: -len(row[0]))
    return [(re.compile(rf"(?<![\w-]){re.escape(p)}(?![\w-])"), country, town) for p, country, town in rows]


ORIGIN_CUE = re.compile(r"originally from|grew up (?:in|on|at)|moved (?:there |here )?from|born in", re.I)


def _places(text: str) -> list[tuple[int, str, str | None]]:
    found: list[tuple[int, int, str, str | None]] = []
    for pat, country, town in _place_patterns():
        for m in pat.finditer(text):
            if not any(s <= m.start() < e for s, e, _, _ in found):
                found.append((m.start(), m.end(), country, town))
    return sorted((s, c, t) for s, _, c, t in found)


def persona_facts(text: str) -> PersonaFacts:
    """Code's reading of a persona: age, gender, where they live and come from, retired, student.

    Args:
        text: a persona, e.g. "A 34-year-old pediatric nurse ... in Manchester, England. She ...".
    Returns:
        The facts the text states; None for each it does not.
    """
    age = re.search(r"\b[Aa]n? (\d{1,3})-year-old\b", text)
    pronoun = re.search(r"\b(she|her|he|his|him)\b", text, re.I)  # the first one is the person's own
    gender = None if not pronoun else "female" if pronoun.group(1).lower() in ("she", "her") else "male"
    if gender is None:
        if re.search(r"\b(widow|mother|woman|wife|grandmother)\b", text, re.I):
            gender = "female"
        elif re.search(r"\b(widower|father|man|husband|grandfather)\b", text, re.I):
            gender = "male"
    origin_spans = [(m.end(), m.end() + 60) for m in ORIGIN_CUE.finditer(text)]
    places = _places(text)
    home = [(s, c, t) for s, c, t in places if not any(a <= s < b for a, b in origin_spans)]
    origin = [(s, c, t) for s, c, t in places if any(a <= s < b for a, b in origin_spans)]
    country = city = None
    towns = [(c, t) for _, c, t in home if t]
    if towns:
        country, city = towns[0]
    elif home:
        country = home[0][1]
    o_country = o_city = None
    o_towns = [(c, t) for _, c, t in origin if t and (c, t) != (country, city)]
    if o_towns:
        o_country, o_city = o_towns[0]
    elif origin and origin[0][1] != country:
        o_country = origin[0][1]
    retired = bool(re.search(r"(?<!semi-)\bretired\b|\bretirement home\b", text, re.I)) or None
    student = bool(re.search(r"\bstudent\b", text, re.I)) or None
    self_employed = bool(re.search(r"\bself-employed\b|\bfreelance\b", text, re.I)) or None
    return PersonaFacts(age=int(age.group(1)) if age else None, gender=gender, country=country, city=city,
                        origin_country=o_country, origin_city=o_city, retired=retired, student=student,
                        self_employed=self_employed)


# --------------------------------------------------------------------------- drawing


@dataclass(frozen=True)
class Identity:
    """The facts code owns about one person, as of the period's start."""

    name: str
    gender: str
    birth_date: dt.date
    age: int
    country: str
    city: str
    hometown: str  # "town, country" where they lived before ``home_since``
    home_since: dt.date
    employer: str  # "none", "self-employed" or an organisation
    employer_since: dt.date | None
    status: str  # "working", "retired", "student", "child"
    education: str | None  # set by code for students and children; None: the generator's words

    @property
    def location(self) -> str:
        return f"{self.city}, {self.country}"


def add_years(d: dt.date, years: int) -> dt.date:
    try:
        return d.replace(year=d.year + years)
    except ValueError:  # 29 February
        return d.replace(year=d.year + years, day=28)


def age_on(birth: dt.date, t: dt.date) -> int:
    return t.year - birth.year - ((t.month, t.day) < (birth.month, birth.day))


def _rng(seed: int, pid: str, what: str) -> random.Random:
    return random.Random(f"{seed}:{pid}:{what}")


def _faker(locale: str, rng: random.Random) -> Faker:
    fake = Faker(locale)  # one instance per draw: never shared across coroutines
    fake.seed_instance(rng.getrandbits(32))
    return fake


def draw_name(region: Region, gender: str, rng: random.Random, taken: set[str], last: str | None = None) -> str:
    """A first and last name for the region and gender, unique among ``taken``, never a placeholder.

    Args:
        last: a family name to keep (a relative), or None to draw one.
    """
    fake = _faker(region.locale, rng)
    for _ in range(200):
        if region.names:
            male, female, lasts = region.names
            first, family = rng.choice(female if gender == "female" else male), rng.choice(lasts)
        elif region.locale == "ja_JP":
            first = fake.first_romanized_name_female() if gender == "female" else fake.first_romanized_name_male()
            family = fake.last_romanized_name()
        else:
            first = fake.first_name_female() if gender == "female" else fake.first_name_male()
            family = fake.last_name()
        name = " ".join(f"{first} {last or family}".split())
        if is_latin(name) and not is_placeholder(name) and not REDRAW.search(name) and name not in taken:
            return name
        if last and _ % 20 == 19:
            last = None  # the family name cannot give a unique name: draw another
    raise RuntimeError(f"no unique name left for {region.country}")


def draw_employer(region: Region, rng: random.Random) -> str:
    fake = _faker(region.locale, rng)
    for _ in range(20):
        name = fake.company().strip()
        if is_latin(name) and not PLACEHOLDER.search(name):
            return name
    if region.names:
        last = rng.choice(region.names[2])
    elif region.locale == "ja_JP":
        last = fake.last_romanized_name()
    else:
        last = _faker("en_GB", rng).last_name()
    return f"{last} {rng.choice(('Trading', 'Holdings', 'Logistics', 'Industries', 'Services'))}"


def birth_for_age(age: int, t: dt.date, rng: random.Random) -> dt.date:
    """A birth date on which someone is ``age`` on day ``t``."""
    latest = add_years(t, -age)
    earliest = add_years(t, -age - 1) + dt.timedelta(days=1)
    return earliest + dt.timedelta(days=rng.randrange((latest - earliest).days + 1))


def draw_identity(seed: int, pid: str, start: dt.date, *, country: str, city: str | None = None,
                  facts: PersonaFacts | None = None, age: int | None = None, gender: str | None = None,
                  employer: str | None = None, hometown: tuple[str, str] | None = None,
                  name_country: str | None = None, last_name: str | None = None, working: bool | None = None,
                  moved_after: dt.date | None = None, taken: set[str] | frozenset[str] = frozenset()) -> Identity:
    """Draw one person's identity, seeded from (run seed, person id).

    The persona's words (``facts``) win over everything else; the keyword arguments are what
    the community needs (the anchor's city, employer, an age that fits the bond).

    Args:
        seed: the run's seed.
        pid: the person's id.
        start: the period's start (ages hold on this day).
        country, city: where they live (city None: a town of the country drawn).
        facts: what their persona says, or None.
        age, gender, employer: fixed values, or None to draw.
        hometown: (country, town) they lived in before moving to ``city``, or None.
        name_country: the country whose names they carry (default: where they come from).
        last_name: a family name to keep (relatives).
        working: force a working-age person to work (True) or not, or None to decide from age.
        moved_after: the earliest day they may have left ``hometown`` (so that a bond there fits).
        taken: names already used in the community.
    Returns:
        The identity.
    """
    rng = _rng(seed, pid, "identity")
    facts = facts or PersonaFacts()
    if facts.country:
        country, city = facts.country, facts.city or (city if facts.country == country else None)
    region = REGIONS[country]
    city = city or rng.choice(region.cities)
    if facts.origin_country:
        hometown = (facts.origin_country, facts.origin_city or rng.choice(REGIONS[facts.origin_country].cities))
    gender = facts.gender or gender or rng.choice(("female", "male"))
    age = facts.age if facts.age is not None else age if age is not None else rng.randint(20, 70)
    birth = birth_for_age(age, start, rng)
    origin = REGIONS[name_country or (hometown[0] if hometown else country)]
    name = draw_name(origin, gender, rng, set(taken), last_name)

    if facts.retired:
        status = "retired"
    elif facts.student or age < 18:
        status = "student" if age >= 5 else "child"
    elif working is not None:
        status = "working" if working else ("retired" if age >= 60 else "student")
    elif age >= 67:
        status = "retired"
    else:
        status = "working"
    if status == "working" and not 18 <= age <= 70:
        status = "retired" if age > 70 else "student"
    education = None
    if status in ("student", "child"):
        education = ("none yet" if age < 5 else "primary school" if age < 12 else "secondary school" if age < 18
                     else "university, in progress")

    if status != "working":
        employer, since = "none", None
    else:
        if facts.self_employed:
            employer = "self-employed"
        employer = employer or draw_employer(region, rng)
        adult = add_years(birth, 18)
        lo = max(adult, add_years(start, -20))
        since = lo + dt.timedelta(days=rng.randrange(max((start - lo).days - 30, 1)))
    if hometown and tuple(hometown) != (country, city):
        moved_lo = max(add_years(birth, min(18, max(age - 1, 0))), moved_after or birth)
        moved_lo = min(moved_lo, start - dt.timedelta(days=60))
        home_since = moved_lo + dt.timedelta(days=rng.randrange(max((start - moved_lo).days - 30, 1)))
        home = f"{hometown[1]}, {hometown[0]}"
    else:
        home_since, home = birth, f"{city}, {country}"
    return Identity(name=name, gender=gender, birth_date=birth, age=age, country=country, city=city, hometown=home,
                    home_since=home_since, employer=employer, employer_since=since, status=status, education=education)


@lru_cache(maxsize=1)
def first_names() -> frozenset[str]:
    """First names of every locale of the table (to find names the generator wrote in prose)."""
    out: set[str] = set()
    for r in REGIONS.values():
        if r.names:
            out.update(r.names[0] + r.names[1])
            continue
        fake = Faker(r.locale)
        for attr in ("first_names_male", "first_names_female", "first_names"):
            for prov in fake.get_providers():
                vals = getattr(prov, attr, None)
                if vals:
                    out.update(v for v in vals if is_latin(v))
    out.update({"John", "Jane", "Maria", "Ana", "Ahmed", "Mohammed", "Priya", "Carlos", "Sarah"})
    return frozenset(n for n in out if n[:1].isupper())


def all_places() -> dict[str, str]:
    """Every town of the table (and its country), for checking what prose names."""
    out = {}
    for r in REGIONS.values():
        for c in (*r.cities, *r.areas.values()):
            out[c] = r.country
    return out
