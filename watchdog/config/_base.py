"""The base every settings model shares: unknown fields are errors, so a typo in a policy file is refused."""

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)
