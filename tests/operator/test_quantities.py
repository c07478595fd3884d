from decimal import Decimal

import pytest

from pets_api.quantities import parse_quantity


@pytest.mark.parametrize("text, value", [
    ("2", Decimal(2)), (2, Decimal(2)), ("500m", Decimal("0.5")), ("1Ki", Decimal(1024)),
    ("4Gi", Decimal(4 * 2**30)), ("1.5G", Decimal("1.5e9")), ("1e3", Decimal(1000)), (".5", Decimal("0.5")),
])
def test_quantities(text, value):
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["two", "1 Gi", "1GB", "", "1.2.3", True, None])
def test_not_quantities(text):
    with pytest.raises(ValueError):
        parse_quantity(text)
