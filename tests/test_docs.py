"""The docs cannot rot unseen: in the README and every page under docs/, bench/, notebooks/ and
results/, every relative link and its anchor resolves, every file named in backticks exists (in
the tree, or in the FOLDER.tar.xz that results/pack.py made of its folder), and every `lookback ...`
command line parses with lookback's own parser, naming a config that exists."""

import re
import shlex
import subprocess
import tarfile
import unicodedata
from functools import cache
from pathlib import Path

import pytest

from lookback.cli import build_parser
from lookback.config import ConfigError, find_config

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted(
    [ROOT / "README.md"]
    + [
        p
        for folder in ("docs", "bench", "notebooks", "results")
        for p in (ROOT / folder).rglob("*.md")
        if not any(part.startswith(".") for part in p.relative_to(ROOT).parts)  # bench/.venv-joey: not ours
    ]
)
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
CODE = re.compile(r"`([^`\n]+)`")
FENCE = re.compile(r"^```[a-z]*\n(.*?)^```", re.S | re.M)
# a path named in backticks: folders and a file with one of these endings, no placeholder in it
FILE = re.compile(r"^[\w.\-/#+]+/[\w.\-#+]+\.(yaml|json|jsonl|log|png|svg|py|md|txt|csv|sh|toml|gz)$")
MADE_BY_RUNS = ("runs/", "studies/", "data/", "/", "~", "model/", "out/")  # what a command writes


def rel(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`|\*\*|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    kept = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in "LN")
    return kept.replace(" ", "-")


@cache
def anchors(page: Path) -> set[str]:
    """The anchors of a page: its headings' slugs (repeats numbered as GitHub does), and ids."""
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    seen: dict[str, int] = {}
    found = set(re.findall(r"<a (?:id|name)=\"([^\"]+)\"", text))
    for line in text.splitlines():
        if m := re.match(r"#{1,6} (.+)", line):
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


@cache
def packed(archive: Path) -> set[str]:
    """The files and folders in a FOLDER.tar.xz of results/pack.py, as paths beside the archive."""
    with tarfile.open(archive) as tar:
        names = {m.name for m in tar.getmembers() if m.isfile()}
    return names | {str(Path(n).parent) for n in names}


def exists(path: Path) -> bool:
    """Whether a path is there: in the tree, or in the archive of a folder above it (a gzipped
    file unzipped there, under its name without .gz)."""
    path = path.resolve()
    if path.exists():
        return True
    for folder in (path, *path.parents):  # the path itself may be a packed folder
        if folder == ROOT or ROOT not in folder.parents:
            return False
        archive = folder.with_name(f"{folder.name}.tar.xz")
        if archive.exists():
            return path.relative_to(folder.parent).as_posix().removesuffix(".gz") in packed(archive)
    return False


def redrawn(page: Path, file: Path) -> bool:
    """A study report's plot that git does not keep (.gitignore: a study only the lab log reads)
    because `lookback study FILE --evaluate-only` draws it again from the kept evaluations."""
    study = page.parent
    if page.name != "report.md" or study.parent != ROOT / "results" / "study":
        return False
    if file.parent != study or file.suffix != ".png":
        return False
    return subprocess.run(["git", "check-ignore", "-q", str(file)], cwd=ROOT, check=False).returncode == 0


def test_a_report_may_link_only_the_plots_git_ignores_for_evaluate_only():
    study = ROOT / "results" / "study" / "avx2_1180"
    assert redrawn(study / "report.md", study / "learning.png")  # .gitignore: drawn again
    assert not redrawn(study / "report.md", study / "results.json.gz")  # kept: must be there
    kept = ROOT / "results" / "study" / "attention_only"  # docs/study.md reads it: its plots are kept
    assert not redrawn(kept / "report.md", kept / "learning.png")
    assert not redrawn(ROOT / "docs" / "study.md", study / "learning.png")  # a doc's link: must be there


def links(page: Path) -> list[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return [t for t in LINK.findall(text) if not re.match(r"[a-z]+:", t)]


def test_the_pages_are_found():
    names = {rel(p) for p in PAGES}
    assert {"README.md", "docs/recipe.md", "bench/README.md", "results/README.md"} <= names


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_every_relative_link_and_anchor_resolves(page):
    broken = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not exists(file) and not redrawn(page, file):
            broken.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target}: no heading with this anchor in {rel(file)}")
    assert not broken, f"{rel(page)}:\n" + "\n".join(broken)


def named_files(page: Path) -> list[str]:
    """Repository paths that a page names in backticks (outside code blocks), generated ones aside."""
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return [
        c
        for c in CODE.findall(text)
        if FILE.match(c) and not c.startswith(MADE_BY_RUNS) and not re.search(r"[A-Z]{3,}|\{|\*|<", c)
    ]


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_every_file_a_page_names_exists(page):
    missing = [n for n in named_files(page) if not exists(ROOT / n) and not exists(page.parent / n)]
    assert not missing, f"{rel(page)} names files that are not there:\n" + "\n".join(missing)


def command_lines(page: Path) -> list[str]:
    """Every `lookback ...` command: in shell code blocks (continued lines joined, comments cut),
    and in backticks in the prose where it has arguments (`lookback train` alone names a command)."""
    text = page.read_text(encoding="utf-8")
    found = []
    for lang, block in re.findall(r"^```([a-z]*)\n(.*?)^```", text, re.S | re.M):
        if lang not in ("", "bash", "sh", "shell", "console"):
            continue
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"\s+#\s.*$|\s+[12]?>.*$", "", line).strip().removeprefix("$ ")  # no comment, no >
            for part in re.split(r"\s*(?:\||&&|;)\s*", line):
                if part.startswith("lookback "):
                    found.append(part)
    prose = FENCE.sub("", text)
    found += [c for c in CODE.findall(prose) if c.startswith("lookback ") and len(c.split()) >= 3]
    # not a synopsis (lookback --debug ..., lookback COMMAND --help) nor output (lookback explorer: ...)
    return [line for line in found if "..." not in line and not re.match(r"\S+ (\S+:|[A-Z]+ )", line)]


def parses(parser, line: str) -> bool:
    """Whether lookback's parser takes the line; [--options] of a synopsis are read as given,
    and a CAPS placeholder (RUN, N, B) as a value when the line needs one there."""
    words = shlex.split(re.sub(r"\[(-[^\]]*)\]", r"\1", line))[1:]
    for attempt in (words, [re.sub(r"^[A-Z][A-Z0-9_]*$", "1", w) for w in words]):
        try:
            parser.parse_args(attempt)
            return True
        except SystemExit as exit:  # --help exits 0
            if exit.code == 0:
                return True
    return False


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_every_lookback_command_parses_and_names_a_config_that_exists(page, capsys):
    parser, wrong = build_parser(), []
    for line in command_lines(page):
        if not parses(parser, line):
            wrong.append(f"{line}: lookback's parser refuses it")
            continue
        words = shlex.split(line)
        if words[1] in ("train", "study") and len(words) > 2 and not re.search(r"[A-Z]{3,}|my_", words[2]):
            try:
                find_config(words[2])
            except ConfigError as exc:
                # a past run's config, packed with its folder; or a study's resolved config, which
                # `lookback study FILE --evaluate-only` writes (untracked: it writes them again)
                made = re.match(r"results/study/[^/]+/configs/[^/]+\.yaml$", words[2])
                if not exists(ROOT / words[2]) and not made:
                    wrong.append(f"{line}: {exc}")
    capsys.readouterr()  # --help's pages
    assert not wrong, f"{rel(page)}:\n" + "\n".join(wrong)


def test_a_packed_folder_still_holds_what_the_pages_name(tmp_path, monkeypatch):
    """results/pack.py packs a folder into FOLDER.tar.xz (gzipped files unzipped inside, the same
    bytes each time) and gives it back; the docs test finds a named file, or the folder, in it."""
    import gzip
    import importlib.util

    spec = importlib.util.spec_from_file_location("pack", ROOT / "results" / "pack.py")
    pack = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pack)
    folder = tmp_path / "results" / "run"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.json").write_text('{"bleu": 1}\n')
    (folder / "sub" / "curve.jsonl.gz").write_bytes(gzip.compress(b'{"step": 1}\n'))
    archive = pack.pack(folder)
    assert archive.name == "run.tar.xz" and not folder.exists()
    first = archive.read_bytes()
    monkeypatch.setitem(globals(), "ROOT", tmp_path)  # exists() looks no further up than ROOT
    for name in ("results/run/a.json", "results/run/sub/curve.jsonl.gz", "results/run/sub", "results/run"):
        assert exists(tmp_path / name), name
    assert not exists(tmp_path / "results/run/b.json")
    assert pack.unpack(archive) == folder
    assert (folder / "sub" / "curve.jsonl").read_text() == '{"step": 1}\n'  # unzipped, as packed
    (folder / "sub" / "curve.jsonl").unlink()  # the folder as it was, packed again
    (folder / "sub" / "curve.jsonl.gz").write_bytes(gzip.compress(b'{"step": 1}\n'))
    archive.unlink()
    assert pack.pack(folder).read_bytes() == first  # the same bytes again: git sees no change


def test_the_evidence_stays_small():
    """Tracked results stay under 5 MB, in fewer files than the code, tests and prose around
    them (results/README.md says how: one evaluations and one curves file per study, packed
    folders, nothing a command makes again)."""
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    evidence = [f for f in tracked if f.startswith("results/") and not f.endswith((".py", ".md"))]
    rest = [f for f in tracked if not f.startswith("results/")]
    size = sum((ROOT / f).stat().st_size for f in evidence if (ROOT / f).exists())
    assert size < 5_000_000, f"results/ holds {size / 1e6:.2f} MB of evidence (at most 5 MB)"
    assert len(evidence) < len(rest), f"{len(evidence)} evidence files against {len(rest)} of code and prose"
