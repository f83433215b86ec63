"""The profiled driver with one sandbox layer changed: a diagnostic for ``bench/profiled_probe.py`` only.

``python bench/profiled_variant.py VARIANT <driver arguments>``. VARIANT: ``shipped`` (as the evaluator
runs it), ``no_broadcast`` (the earlier threads are left unrestricted), ``no_scope`` (Landlock without
the signal scope), ``neither``, ``tmp_write`` (``/tmp`` writable too),
``no_scope_tmp_write``, ``signal_only`` (the broadcast's signals as shipped, but the earlier threads
take a ruleset that only handles making block devices: the signals without the confinement), ``late``
(memcheck's driver jailed after CUDA's start-up, as before the thirteenth session, with the broadcast;
``shipped`` jails it before). The evaluator never runs this file.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ptxgym.confine import landlock  # noqa: E402
from ptxgym.evaluation.sandboxed import driver, sandbox  # noqa: E402

VARIANTS = (
    "shipped",
    "no_broadcast",
    "no_scope",
    "neither",
    "tmp_write",
    "no_scope_tmp_write",
    "signal_only",
    "late",
)


def main() -> int:
    variant, rest = sys.argv[1], sys.argv[2:]
    if variant not in VARIANTS:
        print(f"profiled_variant: unknown variant {variant!r}", file=sys.stderr)
        return 2
    if variant == "late":
        driver.EARLY_JAIL_MODES = ()
    if variant in ("no_broadcast", "neither"):
        sandbox._restrict_others = lambda fd: (False, "the probe skipped the broadcast")
    if variant in ("no_scope", "neither", "no_scope_tmp_write"):
        landlock.SCOPE_SIGNAL = 0
    if variant == "signal_only":
        shipped_broadcast = sandbox._restrict_others
        weak = landlock.Ruleset(landlock.abi()[0], landlock.MAKE_BLOCK, 0, 0)
        sandbox._restrict_others = lambda fd: shipped_broadcast(weak.fd)
    if variant.endswith("tmp_write"):
        shipped = sandbox._writable_paths
        sandbox._writable_paths = lambda scratch, write, shm=False: [
            *shipped(scratch, write, shm),
            (Path("/tmp"), write),
        ]
    print(f"profiled_variant: {variant}", file=sys.stderr)
    return driver.main(rest)


if __name__ == "__main__":
    sys.exit(main())
