"""Element load/store counts reproduce the memory-access table of Milakov and Gimelshein (2018)."""

import numpy as np
import pytest

import flashmath as fm
from flashmath.traffic import SOFTMAX_VARIANTS, naive_softmax_counted, online_softmax_counted, safe_softmax_counted

MEMORY_ACCESS_TABLE = {  # variant: (loads, stores, accesses) per element
    "naive softmax": (2, 1, 3),
    "safe softmax": (3, 1, 4),
    "online softmax": (2, 1, 3),
}


@pytest.mark.parametrize("length", [1, 7, 100])
@pytest.mark.parametrize("name", list(MEMORY_ACCESS_TABLE))
def test_counts_match_table_1(name, length):
    x = np.random.default_rng(length).normal(size=length)
    y, count = SOFTMAX_VARIANTS[name](x)
    assert count.per_element() == MEMORY_ACCESS_TABLE[name]
    assert count.loads == MEMORY_ACCESS_TABLE[name][0] * length
    assert len(count.passes) == {"naive softmax": 2, "safe softmax": 3, "online softmax": 2}[name]
    np.testing.assert_allclose(y, fm.safe_softmax(x), rtol=1e-13)


def test_counted_variants_keep_the_conventions():
    masked = np.full(3, -np.inf)
    assert np.isnan(naive_softmax_counted(masked)[0]).all()
    assert safe_softmax_counted(masked)[0].tolist() == [0.0] * 3
    assert online_softmax_counted(masked)[0].tolist() == [0.0] * 3
    assert np.isnan(online_softmax_counted([1.0, np.nan])[0]).all()
    assert np.isnan(naive_softmax_counted([1e4, 0.0])[0][0])  # overflow, the lesson
    np.testing.assert_allclose(online_softmax_counted([1e4, 0.0])[0], [1.0, 0.0])
