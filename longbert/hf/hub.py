"""Where `longbert.hf.hub` was imported from before it moved to `longbert.modeling.hub` (model folders read from and
pushed to the hub are the model room's, which the transformers wrapper here builds on): the same functions."""

from longbert.modeling.hub import download, is_hub_id, push_to_hub

__all__ = ["download", "is_hub_id", "push_to_hub"]
