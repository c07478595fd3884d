"""Kubernetes resource quantities (`500m`, `2Gi`, `1e3`) parsed to exact decimals.

The one parser: the operator's spec validation and the local cluster's scheduler both use it.
It follows apimachinery's grammar (resource.Quantity); `kubernetes.utils.parse_quantity` is not
used because it accepts what a cluster refuses (`1 Gi`, `1K`, `1_000`, `1e3k`, `NaN`, `True`),
so the grammar check here would still be needed and only the suffix table would be saved.
"""
from __future__ import annotations

import re
from decimal import Decimal

_QUANTITY = re.compile(r"^(?P<number>[+-]?(\d+(\.\d*)?|\.\d+))(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?$")
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1), "k": Decimal("1e3"),
            "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"), "P": Decimal("1e15"), "E": Decimal("1e18")}


def parse_quantity(value: object) -> Decimal:
    """The quantity's value; ValueError with the offending text when it is not a Kubernetes quantity."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"{value!r} is not a quantity")
    text = str(value).strip()
    match = _QUANTITY.match(text)
    if not match:
        raise ValueError(f"{text!r} is not a quantity (examples: 2, 500m, 4Gi)")
    number = Decimal(match["number"])
    suffix = match["suffix"] or ""
    if suffix in _BINARY:
        return number * _BINARY[suffix]
    if suffix in _DECIMAL:
        return number * _DECIMAL[suffix]
    return number * (Decimal(10) ** int(suffix[1:]))
