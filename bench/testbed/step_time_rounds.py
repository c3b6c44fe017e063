"""The rounds of points the step-time model predicts ahead of their runs
(:mod:`bench.testbed.step_time_fit`): which files each round's constants are fitted on, which
layouts and rates it predicts, and the file that measures them. A round is added, never
changed: its predictions are pinned by a test once committed.
"""

from __future__ import annotations

import dataclasses

from bench.testbed.testbed_inputs import CHECK_FILES, RATES_FILE

#: (label, devices per process, rates, the file that measures them, the file whose bytes and
#: ratios they are predicted with, the global batch: the preset's 2048 where the device count
#: divides it, else the largest multiple of the device count below it)
Group = tuple[str, int, tuple[str, ...], str, str, int]


@dataclasses.dataclass(frozen=True)
class Round:
    """One round of predictions ahead: constants fitted on ``fit_files`` (each with its codec
    benchmark), then ``groups`` predicted before their files were measured."""

    name: str
    fit_files: tuple[tuple[str, str], ...]
    groups: tuple[Group, ...]
    token_bucket: bool = False  # the rate limiter's burst modelled (Cluster.inter_burst_bytes)
    message_latency: bool = False  # the inter-node message latency fitted (else assumed)


ROUNDS_1_2 = (
    Round(
        "Round 1: constants fitted on the four files of the first check",
        CHECK_FILES[:4],
        (
            ("2x3", 3, ("unlimited", "500mbit", "100mbit"), "netns_two_node_2x3.json",
             "netns_two_node_2x4.json", 2046),
            ("2x2 at 100 Mbit/s", 2, ("100mbit",), "netns_two_node_2x2_100mbit.json", RATES_FILE,
             2048),
            ("2x4 at 100 Mbit/s", 4, ("100mbit",), "netns_two_node_2x4_100mbit.json",
             "netns_two_node_2x4.json", 2048),
        ),
    ),
    Round(
        "Round 2: constants fitted again on round 1's files (the code and machine of today), "
        "the rate limiter's token bucket modelled",
        (
            ("netns_two_node_2x3.json", "codec_testbed.json"),
            ("netns_two_node_2x2_100mbit.json", "codec_testbed.json"),
            ("netns_two_node_2x4_100mbit.json", "codec_testbed.json"),
        ),
        (
            ("2x2 at 200 Mbit/s", 2, ("200mbit",), "netns_two_node_2x2_200mbit.json",
             "netns_two_node_2x2_100mbit.json", 2048),
            ("2x3 at 250 Mbit/s", 3, ("250mbit",), "netns_two_node_2x3_250mbit.json",
             "netns_two_node_2x3.json", 2046),
            ("2x4 at 200 Mbit/s", 4, ("200mbit",), "netns_two_node_2x4_200mbit.json",
             "netns_two_node_2x4_100mbit.json", 2048),
        ),
        token_bucket=True,
    ),
)  # fmt: skip
#: every round, in the order they were predicted; rounds 1 and 2 ran auto's first rule
ROUNDS = (
    *ROUNDS_1_2,
    Round(
        "Round 3: constants fitted on the six files of rounds 1 and 2 measured the same day",
        tuple((g[3], "codec_testbed.json") for r in ROUNDS_1_2 for g in r.groups),
        (
            ("2x2 at 500 Mbit/s", 2, ("500mbit",), "netns_two_node_2x2_500mbit.json",
             "netns_two_node_2x2_200mbit.json", 2048),
            ("2x3 at 150 Mbit/s", 3, ("150mbit",), "netns_two_node_2x3_150mbit.json",
             "netns_two_node_2x3_250mbit.json", 2046),
            ("2x4 at 400 Mbit/s", 4, ("400mbit",), "netns_two_node_2x4_400mbit.json",
             "netns_two_node_2x4_200mbit.json", 2048),
        ),
        token_bucket=True,
    ),
    Round(
        "Round 4: constants fitted on the eight files measured with the current code (round "
        "3's and auto's), the inter-node message latency among them",
        tuple((f"netns_{f}.json", "codec_testbed.json") for f in (
            "auto_2x2_200mbit", "auto_2x4_200mbit", "auto_2x3", "auto_2x2_100mbit",
            "auto_2x4_100mbit", "two_node_2x2_500mbit", "two_node_2x3_150mbit",
            "two_node_2x4_400mbit")),
        (
            ("2x2 at 300 Mbit/s", 2, ("300mbit",), "netns_two_node_2x2_300mbit.json",
             "netns_two_node_2x2_500mbit.json", 2048),
            ("2x3 at 400 Mbit/s", 3, ("400mbit",), "netns_two_node_2x3_400mbit.json",
             "netns_two_node_2x3_150mbit.json", 2046),
            ("2x4 at 300 Mbit/s", 4, ("300mbit",), "netns_two_node_2x4_300mbit.json",
             "netns_two_node_2x4_400mbit.json", 2048),
        ),
        token_bucket=True,
        message_latency=True,
    ),
)  # fmt: skip
