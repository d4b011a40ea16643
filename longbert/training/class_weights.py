"""The loss's class weights (`model.class_weights`), from the training labels."""

from __future__ import annotations

import numpy as np
import torch

from longbert.errors import LongbertError


def class_weights_for(setting, train_labels: list, label_names: list[str], multi_label: bool) -> torch.Tensor | None:
    """`model.class_weights` as a (C,) tensor for the loss, or None. balanced: n_documents / (n_classes * count) per
    class (scikit-learn's "balanced"); for multi-label, each label's negatives / positives (its pos_weight). A list
    must hold one weight per class. balanced with a class (a label) that no training document has is refused, as
    scikit-learn refuses it: its weight would be made up."""
    if setting is None:
        return None
    n_classes = len(label_names)
    if isinstance(setting, list):
        if len(setting) != n_classes:
            raise LongbertError(f"model.class_weights has {len(setting)} weights but the data has {n_classes} "
                                f"classes ({', '.join(label_names)})")
        return torch.tensor(setting, dtype=torch.float32)
    labels = np.asarray(train_labels)
    counts = labels.sum(0) if multi_label else np.bincount(labels, minlength=n_classes)  # (C,) positives / documents
    absent = [name for name, count in zip(label_names, counts) if count == 0]
    if absent:
        kind = "label" if multi_label else "class"
        raise LongbertError(f"model.class_weights balanced: no training document has the {kind}"
                            f"{'s' if len(absent) > 1 else ''} {', '.join(absent)}; give the weights as a list, one "
                            f"per {kind}, or train on documents of {'them' if len(absent) > 1 else 'it'}")
    if multi_label:
        return torch.tensor((len(labels) - counts) / counts, dtype=torch.float32)
    return torch.tensor(len(labels) / (n_classes * counts), dtype=torch.float32)
