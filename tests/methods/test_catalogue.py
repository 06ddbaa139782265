"""The methods page, generated from the registry: a method's row, its settings' rows and its module's notes."""

from dataclasses import dataclass

from mia_fast.methods import REGISTRY
from mia_fast.methods.catalogue import method_table, methods_page, module_notes, settings_table
from mia_fast.methods.registry import Method
from mia_fast.methods.settings import setting


@dataclass(frozen=True)
class PipeSettings:
    width: int = setting(2, "pipes | per text", "pipe-width", scores=False)
    hidden: int = setting(1, "set from Python")


def piped(inputs):
    """Pipes | the text's loss."""


def test_a_methods_row_and_its_settings_rows():
    method = Method("piped", piped, settings=(PipeSettings,), takes_k=True)
    assert method_table([method]).splitlines()[2] == (
        "| `piped` | Pipes \\| the text's loss. | yes | `--pipe-width`, `PipeSettings.hidden` |"
    )
    assert settings_table([method]).splitlines()[2:] == [
        "| `--pipe-width` | `piped` | `2` | no | pipes \\| per text. |"
    ]


def test_the_page_has_every_method_and_its_modules_notes_once():
    page = methods_page()
    assert all(f"| `{name}` |" in page for name in REGISTRY)
    notes = module_notes([REGISTRY["loss"], REGISTRY["zlib"]])
    assert notes.count("### ") == 1 and notes.startswith("### `loss`, `zlib`\n\nThe likelihood baselines")
    assert "*Module: `mia_fast.methods.likelihood`.*" in notes
