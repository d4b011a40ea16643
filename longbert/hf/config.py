"""Where `longbert.hf.config` was imported from before it moved to `longbert.modeling.hf_config` (config.json is
written with every model folder, the model room's job): the same names; importing it registers LongbertConfig with
AutoConfig, as importing the module itself does."""

from longbert.modeling.hf_config import ARCHITECTURE, MODEL_TYPE, PROBLEM_TYPES, LongbertConfig

__all__ = ["ARCHITECTURE", "MODEL_TYPE", "PROBLEM_TYPES", "LongbertConfig"]
