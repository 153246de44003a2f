"""Stage 01's parts, one job a module; ``pbench.social_graph`` is the stage's face (its entry
points and the names notebooks and later stages use).

Each module imports only the ones above it in this list (and never this package's
``__init__`` or ``pbench.social_graph``):

- ``view``: ``CommunityView``, the community on any date (the query API later stages use);
- ``facts``: life facts and bond rules: when two people may have met, as what, and the story;
- ``rules``: the one rule set, ``check`` (over the period) and ``audit`` (over lives);
- ``repair``: mends what the period's rules find, recording each change;
- ``drafts``: what the generator role is asked to write (its reply schemas);
- ``prose``: the generator's prose made to agree with code's names and facts;
- ``people``: seed personas and a person's dated profile;
- ``plan``: code's seeded plan: sizes, seeds, newcomers, anchors, dated bonds and groups;
- ``groups``: the generator's groups checked, and groups code forms around shared facts;
- ``generator``: plan, ask the model, check and repair; ``build`` and its report;
- ``files``: ``community.json`` and ``community.graphml``;
- ``display``: tables and figures for notebook 01.
"""
