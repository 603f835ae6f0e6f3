"""The torch wheel this package needs: its native module and the `impala` binary link that wheel's
libtorch, so another torch version fails to load them with a loader error that names no fix.
Read from the installed package's own requirement (pyproject's `dependencies`), with
importlib.metadata only: the `impala` launcher loads this file alone, without the package."""

from importlib import metadata


def torch_problem():
    """None when the installed torch is the one required, else one line saying what to do."""
    try:
        pins = [r.split("==", 1)[1].split(";")[0].strip() for r in metadata.requires("impala-rs") or [] if r.startswith("torch==")]
    except metadata.PackageNotFoundError:
        return None  # not installed as a distribution (a source folder on sys.path): no pin to check
    if not pins:
        return None
    wanted = pins[0]
    try:
        found = metadata.version("torch")
    except metadata.PackageNotFoundError:
        return f"impala_rs needs torch=={wanted} (it links that wheel's libtorch), and torch is not installed; fix: pip install torch=={wanted}"
    if found.split("+", 1)[0] != wanted:
        return (
            f"impala_rs needs torch=={wanted} (it links that wheel's libtorch), but this environment "
            f"has torch {found}; fix: pip install torch=={wanted} (or a virtualenv of its own for impala_rs)"
        )
    return None
