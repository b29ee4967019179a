"""Slurm hostlist expressions: `gpu-[01-16,20]`, `a[1-2]-b[3-4]`, `n1,n[3-5]`.

Expansion keeps Slurm's order (left to right, the first bracket varying slowest); compression
groups names that differ in one trailing number and keeps zero padding.

An expression's size is counted from its ranges before anything is expanded (`count`), so that
`n[0-999][0-999999]`, 18 characters for 10^9 names, is refused in microseconds, not after
minutes and gigabytes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

MAX_NAMES = 100_000  # a hundred times the clusters we size for; a few MB and ~50 ms to expand
# the names' characters all together (a separator each): 100,000 names of 4,000 characters each,
# 4,089 characters written, were ~420 MiB expanded; past this the expression is refused unexpanded
MAX_BYTES = 16 * 1024 * 1024
MAX_DIGITS = 18  # a range bound longer than this is no node number (and int() stays cheap)


class HostlistError(ValueError):
    pass


def _split_top(expr: str) -> list[str]:
    """Split on commas that are not inside brackets."""
    parts: list[str] = []
    depth = 0
    start = 0
    for i, ch in enumerate(expr):
        if ch == "[":
            if depth:
                raise HostlistError(f"nested '[' in {expr!r}")
            depth = 1
        elif ch == "]":
            if not depth:
                raise HostlistError(f"unbalanced ']' in {expr!r}")
            depth = 0
        elif ch == "," and not depth:
            parts.append(expr[start:i])
            start = i + 1
    if depth:
        raise HostlistError(f"unbalanced '[' in {expr!r}")
    parts.append(expr[start:])
    return [p.strip() for p in parts if p.strip()]


def _ranges(spec: str, whole: str) -> list[tuple[str, int, int]]:
    """A bracket's items as (first as written, first, last), checked but not expanded."""
    out: list[tuple[str, int, int]] = []
    for raw in spec.split(","):
        item = raw.strip()
        if not item:
            raise HostlistError(f"empty range in {whole!r}")
        lo, sep, hi = item.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise HostlistError(f"bad range {item!r} in {whole!r}")
        if len(lo) > MAX_DIGITS or len(hi) > MAX_DIGITS:
            raise HostlistError(f"range {item!r} has numbers too long in {whole!r}")
        a = int(lo)
        b = int(hi) if sep else a
        if b < a:
            raise HostlistError(f"descending range {item!r} in {whole!r}")
        out.append((lo, a, b))
    return out


def _pieces(pattern: str) -> list[str | list[tuple[str, int, int]]]:
    """A pattern as literal text and bracket ranges, in order."""
    out: list[str | list[tuple[str, int, int]]] = []
    for piece in re.split(r"(\[[^\[\]]*\])", pattern):  # no `[` inside: each `[` is tried once
        if piece.startswith("["):
            out.append(_ranges(piece[1:-1], pattern))
        elif "]" in piece:
            raise HostlistError(f"unbalanced ']' in {pattern!r}")
        elif piece:
            out.append(piece)
    return out


def _size(pieces: list[str | list[tuple[str, int, int]]]) -> int:
    size = 1
    for piece in pieces:
        if not isinstance(piece, str):
            size *= sum(b - a + 1 for _, a, b in piece)
    return size


def _widths(lo: str, a: int, b: int) -> int:
    """The characters of the numbers a..b as written (zero-padded to `lo`'s width when it is)."""
    pad = len(lo) if lo.startswith("0") and len(lo) > 1 else 0
    total = 0
    for digits in range(1, MAX_DIGITS + 2):  # the numbers of each length, counted, not listed
        first, last = max(a, 10 ** (digits - 1) if digits > 1 else 0), min(b, 10**digits - 1)
        if first <= last:
            total += (last - first + 1) * max(digits, pad)
    return total


def _bytes(pieces: list[str | list[tuple[str, int, int]]]) -> int:
    """The characters of every name the pattern expands to, each with a separator."""
    names = _size(pieces)
    total = names * (1 + sum(len(p) for p in pieces if isinstance(p, str)))
    for piece in pieces:
        if not isinstance(piece, str):
            count = sum(b - a + 1 for _, a, b in piece)
            total += names // count * sum(_widths(lo, a, b) for lo, a, b in piece)
    return total


def count(expr: str, limit: int = MAX_NAMES, max_bytes: int = MAX_BYTES) -> int:
    """How many names `expr` expands to (duplicates counted), computed without expanding it;
    HostlistError when it is malformed, more than `limit` names or more than `max_bytes`
    characters of names. Cost: linear in the text."""
    if expr is None or expr.strip() in {"", "(null)"}:
        return 0
    total = size = 0
    for part in _split_top(expr.strip()):
        pieces = _pieces(part)
        total += _size(pieces)
        if total > limit:
            raise HostlistError(f"{_short(expr)} names more than {limit} nodes")
        size += _bytes(pieces)
        if size > max_bytes:
            raise HostlistError(f"{_short(expr)} expands to more than {max_bytes} bytes of names")
    return total


def _short(expr: str) -> str:
    return repr(expr) if len(expr) <= 80 else repr(expr[:77] + "...")


def _choices(ranges: list[tuple[str, int, int]]) -> list[str]:
    out: list[str] = []
    for lo, a, b in ranges:
        width = len(lo) if lo.startswith("0") and len(lo) > 1 else 0
        out.extend(str(n).zfill(width) for n in range(a, b + 1))
    return out


def expand(expr: str, limit: int = MAX_NAMES) -> list[str]:
    """Expand a hostlist expression to names, in order, duplicates kept as Slurm does; refused
    (HostlistError) before any expansion when it would give more than `limit` names."""
    count(expr, limit)
    if expr is None or expr.strip() in {"", "(null)"}:
        return []
    names: list[str] = []
    for part in _split_top(expr.strip()):
        expanded = [""]
        for piece in _pieces(part):
            if isinstance(piece, str):
                expanded = [n + piece for n in expanded]
            else:
                choices = _choices(piece)
                expanded = [n + c for n in expanded for c in choices]
        names.extend(expanded)
    return names


_DIGITS = "0123456789"


def _tail_number(name: str) -> tuple[str, str] | None:
    """(prefix, trailing digits), or None without them. Not `^(.*?)(\\d+)$`: that tries the digits
    again from each character (quadratic in a long run of digits)."""
    prefix = name.rstrip(_DIGITS)
    return None if len(prefix) == len(name) else (prefix, name[len(prefix) :])


def compress(names: Iterable[str]) -> str:
    """Compress names to one expression; `expand(compress(x))` gives x sorted by group, deduplicated."""
    groups: dict[tuple[str, int], set[int]] = {}
    plain: list[str] = []
    order: list[tuple[str, int] | str] = []
    seen: set[str] = set()
    for name in names:
        if name in seen:
            continue
        seen.add(name)
        m = _tail_number(name)
        if not m or "[" in name or "," in name:
            plain.append(name)
            order.append(name)
            continue
        prefix, digits = m
        # zero padding is part of the identity: n01 and n1 are different names
        width = len(digits) if digits.startswith("0") and len(digits) > 1 else 0
        key = (prefix, width)
        if key not in groups:
            groups[key] = set()
            order.append(key)
        groups[key].add(int(digits))
    out: list[str] = []
    for item in order:
        if isinstance(item, str):
            out.append(item)
            continue
        prefix, width = item
        nums = sorted(groups[item])
        if len(nums) == 1:
            out.append(f"{prefix}{str(nums[0]).zfill(width)}")
            continue
        ranges: list[str] = []
        start = prev = nums[0]
        for n in [*nums[1:], None]:
            if n is not None and n == prev + 1:
                prev = n
                continue
            a, b = str(start).zfill(width), str(prev).zfill(width)
            ranges.append(a if start == prev else f"{a}-{b}")
            if n is not None:
                start = prev = n
        out.append(f"{prefix}[{','.join(ranges)}]")
    return ",".join(out)
