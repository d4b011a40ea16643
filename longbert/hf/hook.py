"""Make transformers' Auto classes know longbert models without making `import longbert` heavy.

Registering a config or model class with transformers needs transformers and torch loaded (seconds), and `import
longbert` loads neither. So `import longbert` only installs an import hook (standard library, nothing loaded): when
transformers loads the module of its Auto configs or of its Auto models, the longbert module that registers with it
is imported right after it (`longbert.modeling.hf_config` registers LongbertConfig with AutoConfig;
`longbert.hf.model` registers LongbertForSequenceClassification with AutoModelForSequenceClassification). Either
import order works: what transformers loaded before `import longbert` is registered at once.
"""

from __future__ import annotations

import importlib
import importlib.abc
import sys
import warnings

# transformers' module -> the longbert module whose import registers longbert's classes with it. Two steps, because
# transformers loads its Auto configs while transformers.modeling_utils is still half-imported (its quantizers need
# them), and a model class cannot be defined before modeling_utils is whole.
REGISTRARS = {
    "transformers.models.auto.configuration_auto": "longbert.modeling.hf_config",
    "transformers.models.auto.modeling_auto": "longbert.hf.model",
}


def install() -> None:
    """Register now with what transformers has loaded, and watch for the rest. Calling it again does nothing."""
    if not any(isinstance(finder, RegisterAfterImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, RegisterAfterImport())
    for watched, registrar in REGISTRARS.items():
        if watched in sys.modules:
            register(registrar)


def register(registrar: str) -> None:
    """Import `registrar` (its import registers it). A module already being imported higher up the stack registers
    itself when it finishes. A failure is a warning, not an error: it must not break the import of transformers."""
    try:
        importlib.import_module(registrar)
    except Exception as error:  # noqa: BLE001 - any failure here would otherwise surface inside transformers' import
        warnings.warn(f"longbert could not register its models with transformers' Auto classes ({registrar}: "
                      f"{type(error).__name__}: {error}); load longbert models with LongDocumentClassifier instead",
                      stacklevel=2)


class RegisterAfterImport(importlib.abc.MetaPathFinder):
    """A meta path finder that finds nothing itself: for a watched module it asks the other finders for the spec and
    wraps the loader, so that the registrar is imported right after the module has run."""

    def find_spec(self, fullname, path, target=None):
        if fullname not in REGISTRARS:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None and not isinstance(spec.loader, ThenRegister):
            spec.loader = ThenRegister(spec.loader, REGISTRARS[fullname])
        return spec


class ThenRegister(importlib.abc.Loader):
    """A loader that runs the module with its own loader, then imports the registrar. Everything else (source,
    file name, resources) is the wrapped loader's."""

    def __init__(self, loader, registrar: str):
        self.loader = loader
        self.registrar = registrar

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module) -> None:
        self.loader.exec_module(module)
        register(self.registrar)

    def __getattr__(self, name):
        if name == "loader":  # not set yet (a copy being made): no recursion through __getattr__
            raise AttributeError(name)
        return getattr(self.loader, name)
