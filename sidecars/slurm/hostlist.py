"""Slurm hostlist expressions: `gpu-[01-16,20]`, `a[1-2]-b[3-4]`, `n1,n[3-5]`.

Expansion keeps Slurm's order (left to right, the first bracket varying slowest); compression
groups names that differ in one trailing number and keeps zero padding.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

MAX_EXPANSION = 1_000_000  # guards against `n[0-999999999]` typed by mistake


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


def _expand_range(spec: str, whole: str) -> list[str]:
    out: list[str] = []
    for raw in spec.split(","):
        item = raw.strip()
        if not item:
            raise HostlistError(f"empty range in {whole!r}")
        lo, sep, hi = item.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise HostlistError(f"bad range {item!r} in {whole!r}")
        if not sep:
            out.append(lo)
            continue
        a, b = int(lo), int(hi)
        if b < a:
            raise HostlistError(f"descending range {item!r} in {whole!r}")
        if b - a >= MAX_EXPANSION:
            raise HostlistError(f"range {item!r} too large in {whole!r}")
        width = len(lo) if lo.startswith("0") and len(lo) > 1 else 0
        out.extend(str(n).zfill(width) for n in range(a, b + 1))
    return out


def _expand_one(pattern: str) -> list[str]:
    pieces = re.split(r"(\[[^\]]*\])", pattern)
    names = [""]
    for piece in pieces:
        if piece.startswith("["):
            choices = _expand_range(piece[1:-1], pattern)
            names = [n + c for n in names for c in choices]
        elif "]" in piece:
            raise HostlistError(f"unbalanced ']' in {pattern!r}")
        else:
            names = [n + piece for n in names]
        if len(names) > MAX_EXPANSION:
            raise HostlistError(f"{pattern!r} expands to too many names")
    return names


def expand(expr: str) -> list[str]:
    """Expand a hostlist expression to names, in order, duplicates kept as Slurm does."""
    if expr is None or expr.strip() in {"", "(null)"}:
        return []
    names: list[str] = []
    for part in _split_top(expr.strip()):
        names.extend(_expand_one(part))
    return names


_TAIL_NUMBER = re.compile(r"^(.*?)(\d+)$")


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
        m = _TAIL_NUMBER.match(name)
        if not m or "[" in name or "," in name:
            plain.append(name)
            order.append(name)
            continue
        prefix, digits = m.groups()
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
