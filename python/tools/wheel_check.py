"""The installed wheel as a Python user meets it (`./dev wheel-check` runs this in a fresh
virtualenv, from an empty folder, with no Rust toolchain on PATH): the `impala` command trains
CartPole-v1 to 450, the README's Python quick start runs as written, and `impala evaluate
--video` writes an MP4 with one frame per step plus the first. Prints one JSON line of timings.

    python wheel_check.py README.md
"""

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path


def run(*argv):
    """Runs a command; its stdout, or the command and its output on a failure."""
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"wheel check: `{' '.join(argv)}` exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return done.stdout


def quick_start(readme):
    """The README's first Python block after its "From Python" heading."""
    text = Path(readme).read_text()
    section = text[text.index("### From Python") :]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    if match is None:
        sys.exit(f"wheel check: no ```python block under '### From Python' in {readme}")
    return match.group(1)


def main(readme):
    assert shutil.which("cargo") is None, "cargo is on PATH: the check must run without Rust"
    started = time.monotonic()
    assert "Usage: impala" in run("impala", "--help")

    summary = json.loads(run("impala", "train", "--quiet", "--summary-json").strip().splitlines()[-1])
    assert summary["episode_return_mean"] >= 450, summary
    trained_s = time.monotonic() - started

    run(sys.executable, "-c", quick_start(readme))

    lines = run("impala", "evaluate", "--checkpoint", summary["checkpoint"], "--episodes", "1", "--video", "videos")
    episode = json.loads(lines.strip().splitlines()[-1])
    import imageio_ffmpeg

    frames, _ = imageio_ffmpeg.count_frames_and_secs(episode["path"])
    assert frames == episode["frames"] == episode["episode_len"] + 1, (frames, episode)
    print(
        json.dumps(
            {
                "impala_train_s": round(trained_s, 1),
                "episode_return_mean": summary["episode_return_mean"],
                "video": episode["path"],
                "video_bytes": Path(episode["path"]).stat().st_size,
                "video_frames": frames,
            }
        )
    )


if __name__ == "__main__":
    main(*sys.argv[1:])
