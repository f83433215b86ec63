"""Progress display on stderr: a tqdm bar when tqdm is installed, else one plain line per turn."""

from __future__ import annotations

import sys
import threading
from collections import Counter
from typing import TextIO

from ptxgym.records.turns import TurnRecord


class Progress:
    """Counts finished turns out of the run's maximum; thread-safe."""

    def __init__(
        self,
        total: int,
        done: int = 0,
        enabled: bool = True,
        stream: TextIO | None = None,
        use_tqdm: bool | None = None,
    ) -> None:
        self.total, self.done = total, done
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.statuses: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._bar = None
        if enabled and use_tqdm is not False:
            try:
                from tqdm import tqdm

                self._bar = tqdm(total=total, initial=done, unit="turn", file=self.stream, dynamic_ncols=True)
            except ImportError:
                self._bar = None

    def turn(self, record: TurnRecord) -> None:
        """One finished turn."""
        with self._lock:
            self.done += 1
            self.statuses[record.status] += 1
            if not self.enabled:
                return
            if self._bar is not None:
                self._bar.update(1)
                self._bar.set_postfix_str(self._mix(), refresh=False)
                return
            spd = f" {record.speedup:.3f}x" if record.speedup else ""
            print(
                f"[{self.done:>4}/{self.total}] {record.trajectory_id} turn {record.turn + 1}: "
                f"{record.status}{spd} ({record.policy_wall_s:.1f} s policy, {record.env_wall_s:.1f} s env)",
                file=self.stream,
                flush=True,
            )

    def skip(self, n: int) -> None:
        """Turns that will not happen (a trajectory ended early)."""
        if n <= 0:
            return
        with self._lock:
            self.done += n
            if self._bar is not None:
                self._bar.update(n)

    def note(self, message: str) -> None:
        """A line that does not break the bar."""
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.write(message, file=self.stream)
        else:
            print(message, file=self.stream, flush=True)

    def _mix(self) -> str:
        return " ".join(f"{k}:{v}" for k, v in self.statuses.most_common(4))

    def close(self) -> None:
        """Finish the bar."""
        if self._bar is not None:
            self._bar.close()
