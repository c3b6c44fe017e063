"""Every public docstring's ``Raises:`` section renders as one entry per exception.

Napoleon (Google style, as docs/conf.py) turns each ``Raises:`` entry into ``:raises X:``. A
continuation line that is not indented further reads as a new entry (its first words shown
as an exception name), and two exceptions written on one line render as one entry. Checked
here on the docstrings of every name in ``__all__`` of ``jax_lossy_comm`` and
``jax_lossy_comm.error_bound`` and of their classes' public methods: each ``:raises X:``
names an exception class, and no entry's text names a second one (``ValueError: ...``).
"""

from __future__ import annotations

import builtins
import inspect
import re

import pytest

import jax_lossy_comm
import jax_lossy_comm.error_bound

napoleon = pytest.importorskip("sphinx.ext.napoleon")
docstring = pytest.importorskip("sphinx.ext.napoleon.docstring")

CONFIG = napoleon.Config(napoleon_google_docstring=True, napoleon_use_ivar=True)
RAISES = re.compile(r"^:raises ([^:]+):(.*)$")
# "SomeError: text" inside an entry: a second exception folded into the first one's text.
FOLDED = re.compile(r"\b([A-Z]\w*(?:Error|Exception|Warning)):\s")


def _public() -> list[tuple[str, object]]:
    """(qualified name, object) of every public function, class and public method."""
    out = []
    for module in (jax_lossy_comm, jax_lossy_comm.error_bound):
        for name in module.__all__:
            obj = getattr(module, name)
            if not (inspect.isfunction(obj) or inspect.isclass(obj)):
                continue  # constants and type aliases have no Raises section
            out.append((f"{module.__name__}.{name}", obj))
            if inspect.isclass(obj):
                for attr, member in vars(obj).items():
                    if attr.startswith("_") and attr != "__call__":
                        continue
                    if isinstance(member, (staticmethod, classmethod)):
                        member = member.__func__
                    if inspect.isfunction(member) or isinstance(member, property):
                        out.append((f"{module.__name__}.{name}.{attr}", member))
    return out


def _exception(name: str, obj: object) -> type | None:
    """The exception class ``name`` stands for: a builtin or a name of obj's module."""
    name = name.strip().strip("`~")
    found = getattr(builtins, name, None)
    if found is None:
        module = inspect.getmodule(getattr(obj, "fget", obj))
        found = module
        for part in name.split("."):
            found = getattr(found, part, None)
    return found if isinstance(found, type) and issubclass(found, BaseException) else None


@pytest.mark.parametrize("name, obj", _public(), ids=lambda v: v if isinstance(v, str) else "")
def test_raises_sections_list_one_exception_class_per_entry(name, obj):
    doc = inspect.getdoc(obj)
    if not doc or "Raises:" not in doc:
        return
    lines = str(docstring.GoogleDocstring(doc, CONFIG, obj=obj)).splitlines()
    entries = []
    for i, line in enumerate(lines):
        m = RAISES.match(line)
        if m:
            text = [m.group(2)]
            for more in lines[i + 1 :]:
                if not more.startswith("   "):
                    break
                text.append(more)
            entries.append((m.group(1), " ".join(text)))
    assert entries, f"{name}: a Raises section that renders no :raises: entry"
    for exc, text in entries:
        assert _exception(exc, obj), f"{name}: ':raises {exc}:' is not an exception class"
        folded = FOLDED.findall(text)
        assert not folded, f"{name}: the {exc} entry also names {folded}: one entry each"
