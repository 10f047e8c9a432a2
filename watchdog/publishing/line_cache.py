"""The parts of exposition lines that repeat from one scrape to the next, kept so they are written once.

On a MIG node almost every byte of a /metrics body is label text that does not change between cycles: the same
56 instances, the same pods, the same GPU UUIDs, only the numbers move. Building each line from a %-template costs
~1.5 µs (a 200-byte string from ten escaped values), which at ~700 series is most of the 5 ms scrape budget and
half the agent's 2 ms per-tick budget. This cache keeps, per sample layout, the finished ``name{labels} `` prefix
of every label-value tuple seen, and the text of each sample value, so a steady scrape is two dictionary hits and
two list appends per line.

Why the output stays byte-identical:

- a prefix is a pure function of (layout, raw label values): the layout key is the %-template itself, which
  spells out the sample name and the sorted label names, and the values tuple is the raw (unescaped) strings;
- a value's text is a pure function of ``float(value)``, and Python dicts find a key by ``==``; two numbers that
  compare equal have the same ``float()`` (an int equal to a float converts to exactly that float), so they
  format the same. The two exceptions are kept out: zero (``-0.0 == 0`` but prints ``-0.0``) and NaN (never
  equal to itself, so it would only pile up entries).

Bounded: entries unused for a while are not tracked one by one; once the cache holds far more entries than one
render needs (pods came and went, values drifted), it is emptied and refills on the next render.

Thread safety: the cache is only read and filled with single dict operations, and every entry is a pure function
of its key, so two renders racing on one cache (a second scraper thread) can at worst compute an entry twice;
emptying it between another render's get and set only costs that render a recomputation.
"""

from __future__ import annotations

from typing import Callable

PrefixMaker = Callable[[tuple[str, ...]], str]

# Beyond this many cached value texts the memo is emptied: changing ratios (utilisation, bandwidth) never repeat
# exactly, so without a bound they would accumulate one entry per sample per cycle.
MAX_VALUE_TEXTS = 8192
# The prefix cache may hold this many times the series of the latest render (plus a floor) before it is emptied;
# twice, so that a text and an OpenMetrics render of one snapshot (counters differ in `_created`) both fit.
PREFIX_SLACK = 2
PREFIX_FLOOR = 1024


class RenderCache:
    """Finished line prefixes per sample layout and finished value texts, shared by successive renders."""

    def __init__(self, *, format_value: Callable[[float], str], escape_label_value: Callable[[str], str]) -> None:
        self._format_value = format_value
        self._escape = escape_label_value
        self._layouts: dict[tuple[str, tuple[str, ...]], tuple[dict[tuple[str, ...], str], PrefixMaker]] = {}
        self._prefix_count = 0
        self.value_texts: dict[float, str] = {}  # value → its text followed by "\n"

    @property
    def prefix_count(self) -> int:
        """Line prefixes held now, over all layouts."""
        return self._prefix_count

    def layout(self, sample_name: str, label_names: tuple[str, ...]) -> tuple[dict[tuple[str, ...], str], PrefixMaker]:
        """The prefix dict of one (sample name, label names) layout and the function that fills it on a miss."""
        key = (sample_name, label_names)
        found = self._layouts.get(key)
        if found is None:
            prefixes: dict[tuple[str, ...], str] = {}
            found = self._layouts[key] = (prefixes, self._prefix_maker(prefixes, sample_name, label_names))
        return found

    def _prefix_maker(
        self, prefixes: dict[tuple[str, ...], str], sample_name: str, label_names: tuple[str, ...]
    ) -> PrefixMaker:
        # Labels are written sorted by name, as client_python does (exposition_formats.md, "Text format details").
        order = sorted(range(len(label_names)), key=label_names.__getitem__)
        if order:
            template = sample_name + "{" + ",".join(f'{label_names[i]}="%s"' for i in order) + "} "
        else:
            template = sample_name + " "
        escape = self._escape

        def make(values: tuple[str, ...]) -> str:
            prefix = prefixes[values] = template % tuple([escape(values[i]) for i in order])
            self._prefix_count += 1
            return prefix

        return make

    def value_text(self, value: float) -> str:
        """``format_value(value) + "\\n"``, memoised except for zero and NaN (see the module docstring)."""
        text = self._format_value(value) + "\n"
        if value and value == value:
            self.value_texts[value] = text
        return text

    def trim(self, *, series_rendered: int) -> None:
        """After a render: empty whatever has grown far past what one render needs."""
        if len(self.value_texts) > MAX_VALUE_TEXTS:
            self.value_texts.clear()
        if self._prefix_count > PREFIX_SLACK * series_rendered + PREFIX_FLOOR:
            # Dropping the layouts (not only their dicts) also drops the makers bound to the old dicts.
            self._layouts.clear()
            self._prefix_count = 0
