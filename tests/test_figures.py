"""Every plot lookback writes as a PNG is in 256 colours: committed plots stay small."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from PIL import Image  # noqa: E402

from lookback.figures import save_figure  # noqa: E402


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
