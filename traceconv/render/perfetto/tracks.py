"""The timeline's tracks: which track an event goes on, what each is called, and its place in the tree.

Every trace of every input is a set of groups: one per host process (a Perfetto process track;
its threads are child tracks), one per GPU device (its streams and counters are child tracks),
and one for the events that name neither. A process keeps its real pid unless an earlier input
used it (a PyTorch trace and an nsys report of the same run side by side), and then gets one of
its own. Group names carry the input's label, so that the ranks of a job and the two sides of a
comparison stay apart.

A track whose slices overlap without nesting gets child tracks (lanes), one per level of
overlap, named after it: Perfetto draws only properly nested slices on one track. Every track
says that the UI must not merge it with a sibling of the same name, which would undo the lanes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

SYNTHETIC_PID = 1 << 30  # above any real pid (Linux: at most 2**22)


@dataclass
class Track:
    uuid: int
    parent: int  # uuid of the parent track; 0 for a group
    rank: int  # order among its siblings
    title: str
    label: str = ""  # groups: the input (and trace) they belong to
    pid: int | None = None  # host process groups: the pid written in their descriptor
    unit: str | None = None  # counter tracks: "bytes", or the metric's unit ("" when it has none)
    running_sum: bool = False  # a counter of allocations (+) and frees (-): the running total is drawn
    detail: str = ""  # said in the name only when a sibling has the same title (see Tracks.finish)
    named: bool = True  # False while the title is made from an id, until the trace names it
    lane: int = 0  # a lane of its parent: the level of overlap it holds (1, 2, ...)

    @property
    def name(self) -> str:
        return f"{self.title} [{self.label}]" if self.label else self.title


@dataclass
class Tracks:
    """Every track of the output, made when first needed; their descriptors wait in ``pending``."""

    tracks: list[Track] = field(default_factory=list)
    by_key: dict[tuple[object, ...], int] = field(default_factory=dict)
    labels: dict[int, str] = field(default_factory=dict)  # trace number -> its label
    pending: list[Track] = field(default_factory=list)
    lanes: dict[int, list[int]] = field(default_factory=dict)  # track index -> uuid of each lane
    _used_pids: set[int] = field(default_factory=set)
    _next_pid: int = SYNTHETIC_PID
    _children: dict[int, int] = field(default_factory=dict)  # parent uuid -> children so far

    def _new(self, key: tuple[object, ...], parent: int, title: str, **attrs: object) -> int:
        rank = self._children.get(parent, 0)
        self._children[parent] = rank + 1
        track = Track(uuid=len(self.tracks) + 1, parent=parent, rank=rank, title=title, **attrs)  # type: ignore[arg-type]
        self.by_key[key] = len(self.tracks)
        self.tracks.append(track)
        self.pending.append(track)
        return len(self.tracks) - 1

    def process(self, seq: int, pid: int | str, name: str | None) -> int:
        """The uuid of the group of host process ``pid`` (an int, or the text a trace wrote instead)."""
        key = ("process", seq, pid)
        index = self.by_key.get(key)
        if index is None:
            real = pid if isinstance(pid, int) and pid not in self._used_pids else None
            if real is None:
                real, self._next_pid = self._next_pid, self._next_pid + 1
            self._used_pids.add(real)
            title = name or (f"process {pid}" if isinstance(pid, int) else pid or "process (no id)")
            index = self._new(key, 0, title, label=self.labels[seq], pid=real, named=name is not None)
        return self.tracks[index].uuid

    def gpu(self, seq: int, device: int) -> int:
        key = ("gpu", seq, device)
        index = self.by_key.get(key)
        if index is None:
            index = self._new(key, 0, f"GPU {device}", label=self.labels[seq])
        return self.tracks[index].uuid

    def unplaced(self, seq: int) -> int:
        """The uuid of the group of the events that name neither a process nor a device."""
        key = ("trace", seq)
        index = self.by_key.get(key)
        if index is None:
            index = self._new(key, 0, "no process", label=self.labels[seq])
        return self.tracks[index].uuid

    def child(self, key: tuple[object, ...], parent: int, title: str, **attrs: object) -> int:
        """The index of track ``key`` under the track ``parent`` (a uuid), made on first use."""
        index = self.by_key.get(key)
        return index if index is not None else self._new(key, parent, title, **attrs)

    def index_of(self, uuid: int) -> int:
        return uuid - 1

    def rename(self, index: int, title: str | None) -> None:
        """Name a track that was named by its id, once the trace names it."""
        track = self.tracks[index]
        if title and not track.named:
            track.title, track.named = title, True

    def lane(self, index: int, level: int) -> int:
        """The uuid of lane ``level`` of track ``index`` (lane 0 is the track itself)."""
        lanes = self.lanes.setdefault(index, [self.tracks[index].uuid])
        while len(lanes) <= level:
            base = self.tracks[index]
            level = len(lanes)
            made = self._new(("lane", index, level), base.uuid, f"{base.title} · overlap {level}", lane=level)
            lanes.append(self.tracks[made].uuid)
        return lanes[level]

    def finish(self) -> None:
        """Say the detail of the waiting tracks that share a title with a sibling (one stream number
        in two processes on one GPU)."""
        seen: dict[tuple[int, str], int] = {}
        for track in self.pending:
            seen[track.parent, track.title] = seen.get((track.parent, track.title), 0) + 1
        for track in self.pending:
            if track.detail and seen[track.parent, track.title] > 1:
                track.title = f"{track.title} ({track.detail})"
            track.detail = ""

    def take_pending(self) -> list[Track]:
        done, self.pending = self.pending, []
        return done
