"""What a run says of the documents it reads: a validation unlike a test of long documents is named in one line."""

from __future__ import annotations

from longbert.config import DataConfig
from longbert.training.run_inputs import validation_unlike_test


def stats(documents: int, median: int, over_512: int) -> dict:
    return {"documents": documents, "median_tokens": median, "over_512": over_512}


def test_a_short_validation_beside_a_long_test_is_named_with_what_each_holds_and_the_setting_that_fixes_it():
    """Only where the user asked for validation of every length (0); by default it follows the test."""
    said = validation_unlike_test(DataConfig(test_longer_than=512, validation_longer_than=0),
                                  {"validation": stats(500, 230, 69), "test": stats(2000, 880, 2000)})
    assert said is not None and "\n" not in said
    for fragment in ("only documents over 512 tokens (2000, median 880)", "validation 500 documents of every length",
                     "median 230, 69 over 512", "data.validation_longer_than unset (null: as the test)", "to 512"):
        assert fragment in said


def test_nothing_is_said_when_validation_is_drawn_like_the_test_or_there_is_no_test():
    long_both = {"validation": stats(237, 850, 237), "test": stats(2000, 880, 2000)}
    assert validation_unlike_test(DataConfig(test_longer_than=512, validation_longer_than=512), long_both) is None
    assert validation_unlike_test(DataConfig(test_longer_than=512), long_both) is None  # the default follows the test
    assert DataConfig(test_longer_than=512).validation_rule() == 512
    assert DataConfig(test_longer_than=512, test_split=None).validation_rule() == 0  # no test, nothing to follow
    assert validation_unlike_test(DataConfig(), {"validation": stats(5, 30, 0), "test": stats(5, 30, 0)}) is None
    assert validation_unlike_test(DataConfig(test_longer_than=512), {"validation": stats(5, 30, 0)}) is None
