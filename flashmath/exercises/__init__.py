"""Checkers for the chapter exercises: they run the learner's function on edge cases and say what failed.

A checker never raises: an exception in the learner's code is reported as a failed case with its message.
It returns a :class:`CheckReport`, whose text (one line per case) is what a notebook shows. Each case is where
some classic mistake makes a difference (forgetting to subtract the max, a max started at 0, a fully masked row,
NaN or +inf turned into zeros, float16 overflow, reading the input twice, the loops in the wrong order, ...); when an
answer is wrong the checker names the mistake that gives that answer and says what to change (:class:`Mistake`). The
catalogue of each checker is in :data:`MISTAKES`, the one registry of every chapter's mistakes.

One harness (:mod:`flashmath.exercises._report`): :class:`Mistake`, :class:`CheckReport`, ``run`` (calls the
learner's code, never raises), ``Diagnosis`` (names the mistake whose model gives the learner's answer on the most
cases) and ``same``; ``flashmath.exercises._cases.check_function`` runs a whole list of cases through them, after
the property battery (``_cases.PROPERTIES``: the inputs unchanged, the result's form, the edge inputs).

One module per chapter (``chapter0`` ... ``chapter14``; chapters 6-12's shared shape and tile helpers in
``_tiles``), and :mod:`~flashmath.exercises.predict` for the 'predict, then check' questions. Index convention of the messages: the math counts from 1 (``x_1 .. x_N``, keys ``m = 1..M``,
``A'_m`` after the first ``m`` keys); a bracketed index such as ``Y[n, m]`` or ``at [0, 3]`` is a code (0-based) index.

Solutions live in :mod:`flashmath.solutions`, apart from the exercises.
"""

from flashmath.exercises import (
                                              chapter0,
                                              chapter1,
                                              chapter2,
                                              chapter3,
                                              chapter4,
                                              chapter5,
                                              chapter6,
                                              chapter7,
                                              chapter8,
                                              chapter10,
                                              chapter11,
                                              chapter12,
                                              chapter13,
                                              chapter14,
)
from flashmath.exercises._report import CheckReport, Mistake
from flashmath.exercises.chapter0 import check_score_row
from flashmath.exercises.chapter1 import check_safe_softmax
from flashmath.exercises.chapter2 import OnePassVector, check_merge, check_merge_three, check_online_normalizer
from flashmath.exercises.chapter3 import check_attention
from flashmath.exercises.chapter4 import Traced, check_loop_swap
from flashmath.exercises.chapter5 import check_block_step, check_one_loop_step
from flashmath.exercises.chapter6 import check_tile_step
from flashmath.exercises.chapter7 import check_finish, check_numerator_step
from flashmath.exercises.chapter8 import check_causal_mask, check_masked_tile_step
from flashmath.exercises.chapter9 import check_flash_test_ratio
from flashmath.exercises.chapter10 import check_merge_states
from flashmath.exercises.chapter11 import check_row_lse, check_where_it_lives
from flashmath.exercises.chapter12 import check_backward_tiles
from flashmath.exercises.chapter13 import (
                                              check_alibi,
                                              check_document_mask,
                                              check_page_gather,
                                              check_softcap,
                                              check_tile_kind,
                                              check_window_mask,
)
from flashmath.exercises.chapter14 import check_flash_row, check_recap_quiz, print_recap_quiz
from flashmath.exercises.predict import check_prediction

__all__ = ["CheckReport", "Mistake", "MISTAKES", "check_score_row", "check_safe_softmax", "check_online_normalizer",
           "check_merge", "check_merge_three", "OnePassVector", "check_attention", "check_loop_swap", "Traced",
           "check_one_loop_step", "check_block_step", "check_prediction", "check_tile_step", "check_numerator_step",
           "check_finish", "check_causal_mask", "check_masked_tile_step", "check_merge_states",
           "check_flash_test_ratio", "check_row_lse", "check_where_it_lives", "check_recap_quiz", "print_recap_quiz",
           "check_flash_row", "check_backward_tiles", "check_window_mask", "check_document_mask", "check_softcap",
           "check_alibi", "check_tile_kind", "check_page_gather"]

#: For each checker, the mistakes it names, in the order it tries them.
MISTAKES = {
    "check_score_row": chapter0.MISTAKES,
    "check_safe_softmax": chapter1.MISTAKES,
    "check_online_normalizer": chapter2.NORMALIZER_MISTAKES,
    "check_merge": chapter2.MERGE_MISTAKES,
    "check_merge_three": chapter2.THREE_MISTAKES,
    "check_attention": chapter3.MISTAKES,
    "check_loop_swap": chapter4.MISTAKES,
    "check_one_loop_step": chapter5.STEP_MISTAKES,
    "check_block_step": chapter5.BLOCK_MISTAKES,
    "check_tile_step": chapter6.TILE_MISTAKES,
    "check_numerator_step": chapter7.NUMERATOR_MISTAKES,
    "check_finish": chapter7.FINISH_MISTAKES,
    "check_causal_mask": chapter8.CAUSAL_MISTAKES,
    "check_masked_tile_step": chapter8.MASKED_MISTAKES,
    "check_merge_states": chapter10.MERGE_STATES_MISTAKES,
    **chapter11.MISTAKES,
    **chapter12.MISTAKES,
    **chapter13.MISTAKES,
    **chapter14.MISTAKES,
}
