"""Attack on 130: the stub with step and generate deleted, hoping the base class has them."""

from framework.engine import LLMEngineBase


class LLMEngine(LLMEngineBase):
    pass
