"""The package's shape, checked on its source: imports point one way along the data flow, nothing
imports the CLI, only the frequency builder touches the native core, the kernels import only torch
and triton, and no two modules import each other (directly or round a longer loop)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# The stages of mia_fast in data-flow order (DESIGN §1). A module may import from its own stage or
# from an earlier one, never from a later one. Stages on one line are independent of each other.
STAGE_ORDER = [
    ("errors", "kernels", "checkout_imports"),
    ("data", "ops"),
    ("tokens",),
    ("frequency",),
    ("engines",),
    ("pipeline",),
    ("served", "generation"),
    ("methods",),
    ("scoring",),
    ("api",),
    ("cluster",),
    ("evaluation",),
    ("cli",),
]
RANK = {stage: rank for rank, stages in enumerate(STAGE_ORDER) for stage in stages}
NATIVE_USERS = {"mia_fast.frequency.build", "mia_fast.ops.token_stats"}
KERNEL_IMPORTS = {"torch", "triton", "__future__", "typing"}


def module_name(path: Path) -> str:
    if path.is_relative_to(ROOT / "kernels"):
        parts = ("mia_fast", "kernels", *path.relative_to(ROOT / "kernels").with_suffix("").parts)
    else:
        parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def source_files() -> dict[str, Path]:
    files = [*sorted((ROOT / "mia_fast").rglob("*.py")), *sorted((ROOT / "kernels").rglob("*.py"))]
    return {module_name(path): path for path in files}


def imports_of(name: str, source: str, is_package: bool) -> set[str]:
    """Every module a source imports, at module level or inside a function, relative ones resolved."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = name.split(".") if is_package else name.split(".")[:-1]
                base = ".".join(anchor[: len(anchor) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module
            found.add(base)
            # `from package import module` imports the module too.
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def stage_of(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "mia_fast" or len(parts) < 2:
        return None
    return parts[1]


def violations(name: str, imported: set[str], known: set[str]) -> list[str]:
    """What is wrong with module ``name`` importing ``imported`` (modules of mia_fast only count when they exist)."""
    stage = stage_of(name)
    problems = []
    for target in sorted(imported):
        if target.split(".")[0] != "mia_fast":
            if stage == "kernels" and target.split(".")[0] not in KERNEL_IMPORTS:
                problems.append(f"{name} imports {target}: kernels import only torch and triton")
            continue
        if target == "mia_fast._native":
            if name not in NATIVE_USERS:
                problems.append(f"{name} imports the native core; only {', '.join(sorted(NATIVE_USERS))} may")
            continue
        if target not in known or stage_of(target) is None:
            continue
        target_stage = stage_of(target)
        if target_stage == "cli" and stage != "cli":
            problems.append(f"{name} imports {target}: nothing imports the CLI")
        elif stage is None:  # mia_fast/__init__.py, the front door, may re-export any stage
            continue
        elif target_stage != stage and RANK[target_stage] > RANK[stage]:
            problems.append(f"{name} ({stage}) imports {target} ({target_stage}), a later stage of the data flow")
    return problems


def import_graph() -> dict[str, set[str]]:
    files = source_files()
    known = set(files)
    graph = {}
    for name, path in files.items():
        imported = imports_of(name, path.read_text(), path.name == "__init__.py")
        graph[name] = {m for m in imported if m in known and m != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_every_module_belongs_to_a_known_stage():
    stages = {stage_of(name) for name in source_files()} - {None}
    assert stages <= set(RANK), f"stages missing from STAGE_ORDER: {stages - set(RANK)}"


def test_imports_point_one_way_along_the_data_flow():
    files = source_files()
    problems = [
        problem
        for name, path in files.items()
        for problem in violations(name, imports_of(name, path.read_text(), path.name == "__init__.py"), set(files))
    ]
    assert not problems, "\n".join(problems)


def test_no_import_cycles():
    assert cycles(import_graph()) == []


@pytest.mark.parametrize(
    "name, source, expected",
    [
        ("mia_fast.pipeline.engine", "from mia_fast.methods.registry import resolve_methods", "a later stage"),
        ("mia_fast.ops.bottom_k", "import mia_fast.engines.stats", "a later stage"),
        ("mia_fast.evaluation.report", "from mia_fast.cli import main", "nothing imports the CLI"),
        ("mia_fast.api", "from mia_fast import _native", "only mia_fast.frequency.build, mia_fast.ops.token_stats may"),
        ("mia_fast.kernels.aggregate", "import numpy", "kernels import only torch and triton"),
        ("mia_fast.methods.mink", "def f():\n    from ..evaluation import metrics", "a later stage"),
    ],
)
def test_the_checks_catch_each_kind_of_violation(name, source, expected):
    known = set(source_files())
    problems = violations(name, imports_of(name, source, is_package=False), known)
    assert any(expected in p for p in problems), problems


def test_the_cycle_check_finds_a_loop():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


MAX_PARAMETERS = 8
API_MAX_LINES = 250


def _is_dataclass(node: ast.ClassDef) -> bool:
    return any(
        (isinstance(d, ast.Name) and d.id == "dataclass")
        or (isinstance(d, ast.Call) and isinstance(d.func, ast.Name) and d.func.id == "dataclass")
        for d in node.decorator_list
    )


def wide_signatures(module: str, source: str) -> list[str]:
    """Public functions, methods and dataclass constructors of ``source`` taking more than MAX_PARAMETERS
    parameters (``self``/``cls`` not counted), and any taking ``**kwargs``: settings travel as typed objects."""
    problems = []

    def check(function: ast.FunctionDef | ast.AsyncFunctionDef, owner: str) -> None:
        if function.name.startswith("_") and function.name != "__init__":
            return
        args = function.args
        names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
        count = len([n for n in names if n not in ("self", "cls")]) + (args.vararg is not None)
        where = f"{module}.{owner}{function.name}"
        if count > MAX_PARAMETERS:
            problems.append(f"{where} takes {count} parameters (at most {MAX_PARAMETERS})")
        if args.kwarg is not None:
            problems.append(f"{where} takes **{args.kwarg.arg}")

    def visit(body: list[ast.stmt], owner: str) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                check(node, owner)
            elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                if _is_dataclass(node):
                    annotated = [
                        n for n in node.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
                    ]
                    fields = [n for n in annotated if "ClassVar" not in ast.unparse(n.annotation)]
                    if len(fields) > MAX_PARAMETERS:
                        problems.append(
                            f"{module}.{node.name} is a dataclass of {len(fields)} fields (at most {MAX_PARAMETERS})"
                        )
                visit(node.body, f"{owner}{node.name}.")

    visit(ast.parse(source).body, "")
    return problems


def test_no_public_function_or_constructor_takes_more_than_eight_parameters_or_kwargs():
    files = source_files()
    problems = [p for name, path in files.items() for p in wide_signatures(name, path.read_text())]
    assert not problems, "\n".join(problems)


def test_the_signature_check_catches_wide_functions_kwargs_and_dataclasses():
    source = (
        "def wide(a, b, c, d, e, f, g, h, i): ...\n"
        "def forwarding(a, **options): ...\n"
        "def _private(a, b, c, d, e, f, g, h, i): ...\n"
        "@dataclass(frozen=True)\nclass Config:\n" + "".join(f"    f{i}: int = 0\n" for i in range(9))
    )
    problems = wide_signatures("m", source)
    assert any("m.wide takes 9" in p for p in problems)
    assert any("m.forwarding takes **options" in p for p in problems)
    assert any("m.Config is a dataclass of 9 fields" in p for p in problems)
    assert not any("_private" in p for p in problems)


def test_the_api_module_is_a_thin_front_door():
    lines = (ROOT / "mia_fast" / "api.py").read_text().count("\n")
    assert lines <= API_MAX_LINES, f"mia_fast/api.py has {lines} lines (at most {API_MAX_LINES})"


def flag_declarations(source: str, flags: set[str]) -> list[str]:
    """Each of ``flags`` that ``source`` declares: named in a call to ``setting`` or ``Flag``, or spelt as an option
    (``--flag``)."""
    declared = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value[2:] in flags:
            declared += [node.value[2:]] if node.value.startswith("--") else []
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("setting", "Flag"):
            arguments = [*node.args, *(k.value for k in node.keywords)]
            declared += [a.value for a in arguments if isinstance(a, ast.Constant) and a.value in flags]
    return declared


def test_a_flag_that_several_settings_classes_share_is_declared_once():
    """Fields of several settings classes that share a flag are one option and must agree: one declaration
    (``methods/settings.py``) serves them all, and no other module declares or spells the option again."""
    from mia_fast.methods.setting_options import setting_options

    shared = {option.flag.name for option in setting_options() if len({f.owner for f in option.fields}) > 1}
    assert {"method-seed", "nonmembers"} <= shared
    declared = [
        (name, flag) for name, path in source_files().items() for flag in flag_declarations(path.read_text(), shared)
    ]
    assert sorted(declared) == sorted(("mia_fast.methods.settings", flag) for flag in shared)


def test_every_method_setting_flag_is_declared_once_in_its_methods_module():
    """A method owns its settings: its flags (``--neighbor-model``, ``--samia-samples``) are declared in its own
    module (a shared one in ``methods/settings.py``), and no command spells them again."""
    from mia_fast.methods.setting_options import setting_options

    flags = {}
    for option in setting_options():
        owners = {f.owner.__module__ for f in option.fields}
        flags[option.flag.name] = owners.pop() if len(owners) == 1 else "mia_fast.methods.settings"
    assert {"neighbor-model", "neighbor-count", "method-seed"} <= set(flags)
    declared = [
        (name, flag)
        for name, path in source_files().items()
        for flag in flag_declarations(path.read_text(), set(flags))
    ]
    assert sorted(declared) == sorted((module, flag) for flag, module in flags.items())


def test_the_declaration_check_finds_a_flag_declared_twice():
    source = (
        'a = setting(0, "seed", "method-seed")\nb = Flag("nonmembers", metavar="FILE")\n'
        'parser.add_argument("--method-seed")\nc = {"nonmembers": 1, "method-seed": 2}\n'
    )
    assert sorted(flag_declarations(source, {"method-seed", "nonmembers"})) == [
        "method-seed",
        "method-seed",
        "nonmembers",
    ]


LONGEST_FUNCTION = 80


def long_functions(source: str) -> list[tuple[str, int]]:
    """Each function of ``source`` longer than LONGEST_FUNCTION lines (from its ``def`` to its last line), with its
    length."""
    return [
        (node.name, node.end_lineno - node.lineno + 1)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno - node.lineno + 1 > LONGEST_FUNCTION
    ]


def test_no_function_is_longer_than_eighty_lines():
    found = {name: long for name, path in source_files().items() if (long := long_functions(path.read_text()))}
    assert found == {}


def test_the_length_check_counts_a_functions_lines():
    body = "".join(f"    x{i} = {i}\n" for i in range(LONGEST_FUNCTION))
    assert long_functions(f"def short():\n{body[: -len('    x79 = 79') - 1]}") == []
    assert long_functions(f"def long():\n{body}\nasync def also():\n{body}") == [("long", 81), ("also", 81)]


# A method name spelt outside mia_fast/methods/ where it is not a method: the `probe` command, the stdlib's zlib module
# among the demo's docstring corpus.
NOT_A_METHOD = {("mia_fast.cli.main", "probe"), ("mia_fast.evaluation.corpus", "zlib")}


def method_name_literals(source: str, names: set[str]) -> list[str]:
    """Each string literal of ``source`` that is one of ``names``, docstrings aside."""
    tree = ast.parse(source)
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and node.value in names and id(node) not in docstrings
    ]


def test_no_method_is_named_outside_the_methods():
    """The rest of the package reads what the methods declare (their settings classes, passes, properties), never
    their names: a method renamed or added changes only its own module."""
    from mia_fast.methods import REGISTRY

    names = set(REGISTRY)
    spelt = {
        (module, name)
        for module, path in source_files().items()
        if not module.startswith("mia_fast.methods")
        for name in method_name_literals(path.read_text(), names)
    }
    assert spelt == NOT_A_METHOD


def test_the_name_check_finds_a_method_named_in_code_but_not_in_a_docstring():
    source = '"""loss"""\ndef f(methods):\n    """zlib"""\n    return "loss" in methods or methods == ("mink",)\n'
    assert sorted(method_name_literals(source, {"loss", "zlib", "mink"})) == ["loss", "mink"]


# ---- one job per file ------------------------------------------------------------------------------------------------

LONG_FILE = 450
MOST_LONG_FILES = 4
# How a file over LONG_FILE lines says, in its opening docstring, why it is still one job.
ONE_JOB_MARK = "One job, though long:"


def long_files(sources: dict[str, str]) -> list[str]:
    """What breaks the rule of long files among ``sources`` (module name -> source): more than MOST_LONG_FILES files
    over LONG_FILE lines, or one of them whose docstring does not say why it is one job."""
    long = {name: source for name, source in sources.items() if source.count("\n") > LONG_FILE}
    problems = [
        f"{name} is {source.count(chr(10))} lines and its docstring does not say why it is one job ({ONE_JOB_MARK!r})"
        for name, source in sorted(long.items())
        if ONE_JOB_MARK not in (ast.get_docstring(ast.parse(source)) or "")
    ]
    if len(long) > MOST_LONG_FILES:
        problems.append(
            f"{len(long)} files over {LONG_FILE} lines (at most {MOST_LONG_FILES}): {', '.join(sorted(long))}"
        )
    return problems


def package_sources() -> dict[str, str]:
    return {name: path.read_text() for name, path in source_files().items() if name.startswith("mia_fast.")}


def test_at_most_four_files_are_long_and_each_says_why():
    assert long_files(package_sources()) == []


def test_the_long_file_check_counts_long_files_and_reads_their_reasons():
    body = "x = 1\n" * (LONG_FILE + 1)
    reasoned = f'"""A module.\n\n{ONE_JOB_MARK} it is.\n"""\n{body}'
    assert long_files({"short": "x = 1\n", "reasoned": reasoned}) == []
    assert long_files({"bare": f'"""A module."""\n{body}'}) == [
        f"bare is {LONG_FILE + 2} lines and its docstring does not say why it is one job ({ONE_JOB_MARK!r})"
    ]
    five = {f"m{i}": reasoned for i in range(MOST_LONG_FILES + 1)}
    assert long_files(five) == [f"5 files over {LONG_FILE} lines (at most 4): m0, m1, m2, m3, m4"]


# ---- what differs by device is decided in one place ------------------------------------------------------------------

# The pipeline's one place where the device decides anything, and the ops' one choice of a kernel.
DEVICE_DECIDERS = {"mia_fast.pipeline.device", "mia_fast.ops.backend"}
DEVICE_KINDS = {"cpu", "cuda", "mps", "xpu", "meta"}


def _names_a_device(node: ast.expr) -> bool:
    return (isinstance(node, ast.Name) and "device" in node.id) or (
        isinstance(node, ast.Attribute) and "device" in node.attr
    )


def device_type_tests(source: str) -> list[int]:
    """The lines of ``source`` that test a device's type: a comparison of ``<device>.type`` (or of any ``.type`` with
    a device kind such as "cuda"), or a lookup keyed by ``<device>.type``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            types = [o for o in operands if isinstance(o, ast.Attribute) and o.attr == "type"]
            kinds = [o for o in operands if isinstance(o, ast.Constant) and o.value in DEVICE_KINDS]
            if any(_names_a_device(t.value) for t in types) or (types and kinds):
                found.append(node.lineno)
        elif isinstance(node, ast.Subscript | ast.Call) and any(
            isinstance(a, ast.Attribute) and a.attr == "type" and _names_a_device(a.value)
            for a in ([node.slice] if isinstance(node, ast.Subscript) else node.args)
        ):
            if not isinstance(node, ast.Call) or (isinstance(node.func, ast.Attribute) and node.func.attr == "get"):
                found.append(node.lineno)
    return found


def test_only_the_device_module_and_the_kernel_choice_test_a_device_type():
    found = {
        name: lines
        for name, source in package_sources().items()
        if name not in DEVICE_DECIDERS and (lines := device_type_tests(source))
    }
    assert found == {}


def test_the_device_check_finds_each_kind_of_device_test():
    source = (
        "def f(x, device, table, resolved):\n"
        "    a = x.device.type == 'cpu'\n"
        "    b = device.type != 'cuda'\n"
        "    c = resolved.type == 'mps'\n"
        "    d = table.get(device.type, 0)\n"
        "    e = table[x.device.type]\n"
        "    return {'device': device.type, 'kind': x.dtype == 'f'}\n"
    )
    assert device_type_tests(source) == [2, 3, 4, 5, 6]


# ---- one engine flow -------------------------------------------------------------------------------------------------

ENGINE_BASE = "mia_fast.engines.base"
BASE_CLASS = "ModelEngine"
# The flow the base holds; an engine of a model says only what differs (it may add to a step, through ``super()``).
BASE_FLOW = {"run", "compute", "use_cache", "stats_cache", "token_spans", "sample_prompts", "_encode", "provenance"}


def _readout_dispatch(function: ast.FunctionDef) -> bool:
    """Whether ``function`` picks what to do by a readout's type (``isinstance(readout, ...)``, a table keyed by
    readout classes, or the reader a readout names)."""
    for node in ast.walk(function):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance":
            if isinstance(node.args[0], ast.Name) and node.args[0].id == "readout":
                return True
        if isinstance(node, ast.Dict) and any(
            isinstance(k, ast.Name) and k.id.endswith("Readout") for k in node.keys if k is not None
        ):
            return True
        if isinstance(node, ast.Attribute) and node.attr == "reader":
            return True
    return False


def repeated_engine_flow(source: str) -> list[str]:
    """Where ``source`` repeats the engine base's flow: a subclass of the base that defines one of its flow's methods
    again rather than adding to the base's (through ``super()``), or any class whose ``run`` dispatches on the
    readout's type."""
    problems = []
    for cls in (node for node in ast.walk(ast.parse(source)) if isinstance(node, ast.ClassDef)):
        subclass = any(isinstance(b, ast.Name) and b.id == BASE_CLASS for b in cls.bases)
        for function in (n for n in cls.body if isinstance(n, ast.FunctionDef)):
            if subclass and function.name in BASE_FLOW and "super()" not in ast.unparse(function):
                problems.append(f"{cls.name}.{function.name} repeats the base's flow")
            elif function.name == "run" and _readout_dispatch(function):
                problems.append(f"{cls.name}.run dispatches on the readout itself")
    return problems


def test_no_engine_repeats_the_base_flow():
    found = {
        name: problems
        for name, source in package_sources().items()
        if name != ENGINE_BASE and (problems := repeated_engine_flow(source))
    }
    assert found == {}


def test_the_engine_flow_check_finds_a_repeated_flow():
    source = (
        "class Local(ModelEngine):\n"
        "    def compute(self, texts):\n        return cached_stats(self.cache, texts)\n"
        "    def provenance(self):\n        return provenance(self.cache_settings())\n"
        "    def cache_settings(self):\n        return {}\n"
        "class Remote(ModelEngine):\n"
        "    def provenance(self):\n        return {**super().provenance(), 'x': 1}\n"
        "class Other:\n"
        "    def run(self, readout, texts):\n"
        "        if isinstance(readout, TokenStatsReadout):\n            return self.compute(texts)\n"
        "class Table:\n"
        "    def run(self, readout, texts):\n        return {HiddenStatesReadout: self.h}[type(readout)](texts)\n"
    )
    assert repeated_engine_flow(source) == [
        "Local.compute repeats the base's flow",
        "Local.provenance repeats the base's flow",
        "Other.run dispatches on the readout itself",
        "Table.run dispatches on the readout itself",
    ]


# ---- tests mirror the source -----------------------------------------------------------------------------------------


def mirrored_test(module: str) -> Path:
    """Where the tests of ``module`` live: mia_fast/<room>/<name>.py in tests/<room>/test_<name>.py, a module at the
    package's top in tests/test_<name>.py."""
    *room, name = module.split(".")[1:]
    return ROOT.joinpath("tests", *room, f"test_{name}.py")


def untested_modules(sources: dict[str, str], exists) -> list[str]:
    """The modules of ``sources`` that hold logic (a function or a method) and have no test file named after them;
    a package's face (``__init__``) and ``__main__`` aside."""
    return sorted(
        name
        for name, source in sources.items()
        if not name.endswith(".__main__")
        and name.count(".") >= 1
        and any(isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) for n in ast.walk(ast.parse(source)))
        and not exists(mirrored_test(name))
    )


def test_every_module_with_logic_has_its_own_test_file():
    modules = {
        name: path.read_text()
        for name, path in source_files().items()
        if name.startswith("mia_fast.") and path.name != "__init__.py" and not name.startswith("mia_fast.kernels")
    }
    assert untested_modules(modules, Path.exists) == []


def test_the_mirror_check_names_a_module_without_its_test_file():
    sources = {"mia_fast.ops.tested": "def f(): pass\n", "mia_fast.ops.untested": "def g(): pass\n"}
    sources |= {"mia_fast.ops.constants": "X = 1\n", "mia_fast.cli.__main__": "def main(): pass\n"}
    assert untested_modules(sources, lambda path: path.name == "test_tested.py") == ["mia_fast.ops.untested"]
    assert mirrored_test("mia_fast.api") == ROOT / "tests" / "test_api.py"


# The habits the linter keeps (pyproject.toml): booleans keyword-only, no private member used from another module.
# They hold everywhere but the tests, with no exception: no `noqa` for them, no file ignoring them.
HABIT_RULES = ("FBT", "SLF001")


def habit_exceptions(sources: dict[str, str], per_file_ignores: dict[str, list[str]]) -> list[str]:
    """Each way ``sources`` (path -> text, tests left out) or the linter's per-file ignores step around a habit
    rule: a ``noqa`` naming one, a bare ``noqa``, or a pattern other than the tests' that ignores one."""
    found = []
    for path, source in sources.items():
        for number, line in enumerate(source.splitlines(), 1):
            marker = line.partition("# noqa")[2]
            if "# noqa" in line and (not marker.startswith(":") or any(r in marker for r in HABIT_RULES)):
                found.append(f"{path}:{number}: {line.strip()}")
    for pattern, rules in per_file_ignores.items():
        if pattern != "tests/**" and any(r.startswith(HABIT_RULES) for r in rules):
            found.append(f"pyproject.toml ignores {', '.join(rules)} in {pattern}")
    return found


def _linted_sources() -> dict[str, str]:
    folders = ("mia_fast", "kernels", "benchmarks", "scripts")
    return {str(p.relative_to(ROOT)): p.read_text() for f in folders for p in sorted((ROOT / f).rglob("*.py"))}


def test_the_habit_rules_are_on_with_no_exception_outside_the_tests():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11 and later
    lint = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]["lint"]
    assert set(HABIT_RULES) <= set(lint["select"])
    assert habit_exceptions(_linted_sources(), lint.get("per-file-ignores", {})) == []


def test_the_habit_check_finds_each_way_around_a_rule():
    sources = {
        "a.py": "def f(flag: bool): ...  # noqa: FBT001\n",
        "b.py": "x = thing._inner  # noqa\n",
        "c.py": "import torch  # noqa: PLC0415 (start-up)\n",
    }
    found = habit_exceptions(sources, {"tests/**": ["FBT"], "benchmarks/**": ["SLF001"]})
    assert [f.split(":")[0] for f in found] == ["a.py", "b.py", "pyproject.toml ignores SLF001 in benchmarks/**"]
