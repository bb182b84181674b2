"""Every plot lookback writes as a PNG is in 256 colours: committed plots stay small; a study's
seeds of one model share a colour and one legend entry."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from PIL import Image  # noqa: E402

from lookback.figures import legend_beside, save_figure, seed_groups  # noqa: E402


def test_a_png_has_at_most_256_colours_and_is_smaller_than_matplotlibs(tmp_path):
    fig, ax = plt.subplots()
    for k in range(12):
        ax.plot(range(50), [(i * k) % 17 for i in range(50)], label=str(k))
    ax.legend()
    save_figure(fig, tmp_path / "ours.png")
    fig.savefig(tmp_path / "theirs.png", dpi=120)
    ours = Image.open(tmp_path / "ours.png")
    assert ours.mode == "P" and len(ours.getcolors(maxcolors=256)) <= 256
    assert ours.size == Image.open(tmp_path / "theirs.png").size
    assert (tmp_path / "ours.png").stat().st_size < (tmp_path / "theirs.png").stat().st_size
    save_figure(fig, tmp_path / "plot.svg")  # another format: matplotlib's own
    assert (tmp_path / "plot.svg").read_text().lstrip().startswith("<?xml")
    plt.close(fig)


def test_the_seeds_of_one_model_share_a_colour_and_one_legend_entry():
    names = [
        "rnn@multi30k",
        "rnn@multi30k#2",
        "rnn@long",
        "transformer@multi30k",
        "rnn@multi30k#3",
        "rnn@long#2",
    ]
    groups = seed_groups(names)
    assert {n: g[0] for n, g in groups.items()} == {
        "rnn@multi30k": "rnn@multi30k",
        "rnn@multi30k#2": "rnn@multi30k",
        "rnn@long": "rnn@long",
        "transformer@multi30k": "transformer@multi30k",
        "rnn@multi30k#3": "rnn@multi30k",
        "rnn@long#2": "rnn@long",
    }
    assert [n for n, g in groups.items() if g[2]] == ["rnn@multi30k", "rnn@long", "transformer@multi30k"]
    assert groups["rnn@multi30k"][1] == groups["rnn@multi30k#3"][1] != groups["rnn@long"][1]
    assert len({g[1] for g in groups.values()}) == 3
    many = seed_groups([f"m{i}#{s}" for i in range(12) for s in (1, 2)])  # past matplotlib's 10 colours
    assert len({tuple(many[f"m{i}#1"][1]) for i in range(12)}) == 12
    fig, ax = plt.subplots()
    for group, colour, first in groups.values():
        ax.plot([0, 1], [0, 1], color=colour, label=group if first else None)
    rect = legend_beside(fig, ax)
    assert rect == (0, 0, 0.76, 1)
    assert [t.get_text() for t in fig.legends[0].get_texts()] == [
        "rnn@multi30k",
        "rnn@long",
        "transformer@multi30k",
    ]
    plt.close(fig)
