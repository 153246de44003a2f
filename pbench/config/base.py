"""What every part of the parameters shares: the error a bad file raises, the strict base
model (unknown keys are errors, values frozen), and the field types of Appendix A (ranges,
fractions)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field


class ConfigError(ValueError):
    """A parameter file is missing, unreadable or invalid. The message is one line per problem."""


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _as_range(value: Any) -> Any:
    # Appendix A gives most volumes as ranges ("1500 - 2000"); a plain int means exactly that many.
    if isinstance(value, bool):
        raise ValueError("expected an integer or a [min, max] pair")
    if isinstance(value, int):
        return (value, value)
    return value


def _check_range(value: tuple[int, int]) -> tuple[int, int]:
    lo, hi = value
    if lo < 0 or hi < lo:
        raise ValueError(f"expected 0 <= min <= max, got [{lo}, {hi}]")
    return value


IntRange = Annotated[tuple[int, int], BeforeValidator(_as_range), AfterValidator(_check_range)]
Fraction = Annotated[float, Field(ge=0.0, le=1.0)]
