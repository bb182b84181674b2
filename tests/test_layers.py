"""The package's sub-packages follow the pipeline: each imports only those before it.

The order is docs/code.md's. An import found anywhere in a module counts, at the top or inside a
function, so a lazy import cannot hide a circle.
"""

import ast
from pathlib import Path

import lookback

PACKAGE = Path(lookback.__file__).parent
# each layer, and the top-level modules it sits with; a layer may import any earlier one
LAYERS = [
    {"errors"},
    {"yamlfile"},
    {"config"},
    {"device"},
    {"display", "figures"},
    {"data"},
    {"model"},
    {"decoding"},
    {"explain"},
    {"training"},
    {"runtime"},
    {"translator", "exercises"},
    {"serve", "study"},
    {"cli", "__init__"},
    {"__main__"},
]
RANK = {name: i for i, layer in enumerate(LAYERS) for name in layer}


def unit(parts: tuple[str, ...]) -> str:
    """The layer member a module belongs to: its sub-package, or its own name at the top."""
    return parts[0] if len(parts) > 1 else parts[0].removesuffix(".py")


def imports(path: Path) -> set[str]:
    """The layer members that the module at `path` imports from within lookback."""
    parts = path.relative_to(PACKAGE).parts
    here = list(parts[:-1])
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = here[: len(here) - (node.level - 1)]
            target = base + (node.module.split(".") if node.module else [node.names[0].name])
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("lookback."):
            target = node.module.split(".")[1:]
        elif isinstance(node, ast.Import):
            names = [a.name.split(".")[1:] for a in node.names if a.name.startswith("lookback.")]
            if not names:
                continue
            target = names[0]
        else:
            continue
        found.add(target[0])
    return found - {unit(parts)}


def test_every_module_belongs_to_a_layer():
    members = {unit(p.relative_to(PACKAGE).parts) for p in PACKAGE.rglob("*.py")}
    assert members - RANK.keys() == set()


def test_each_layer_imports_only_earlier_ones():
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        me = unit(path.relative_to(PACKAGE).parts)
        for other in imports(path):
            if RANK[other] >= RANK[me]:
                wrong.append(f"{path.relative_to(PACKAGE)} imports {other}")
    assert wrong == []


def test_the_check_sees_a_lazy_upward_import(tmp_path):
    bad = tmp_path / "lookback" / "data" / "bad.py"
    bad.parent.mkdir(parents=True)
    bad.write_text("def f():\n    from ..training.train import Trainer\n", encoding="utf-8")
    global PACKAGE
    kept, PACKAGE = PACKAGE, tmp_path / "lookback"
    (PACKAGE / "training").mkdir()
    try:
        assert imports(bad) == {"training"}
    finally:
        PACKAGE = kept
