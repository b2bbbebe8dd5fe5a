"""Where ranks go once NPUs or hosts are excluded (plan/placement.py), by value: a spare NPU of the same
host in the excluded NPU's place, a spare host in a lost host's place, HCCL's device groups on Atlas
training servers, shrinking, NoSpare's text, device_ips following the devices, determinism; and the
same through build_plan."""

from __future__ import annotations

from pathlib import Path
from typing import List, Tuple

import pytest

from npulaunch.config.cluster import ClusterConfig, HostConfig
from npulaunch.config.load import parse_config
from npulaunch.config.yamlsource import parse_yaml
from npulaunch.host.errors import ConfigError, PlanError
from npulaunch.plan.build import build_plan
from npulaunch.plan.launchplan import Discovery
from npulaunch.plan.placement import Arrangement, Exclusion, NoSpare, arrange, needs_arranging

HEAD = "version: 1\njob:\n  command: [python3, train.py]\n  log_dir: /srv/logs\n"
EIGHT = tuple(range(8))


def config_of(text: str) -> ClusterConfig:
    return parse_config(parse_yaml(HEAD + text, "cluster.yaml"), base_dir="/srv")


def resolve(index: int, host: HostConfig) -> Tuple[int, ...]:
    """devices: all is a server of eight NPUs."""
    return host.devices if isinstance(host.devices, tuple) else EIGHT


def placed(arrangement: Arrangement) -> List[Tuple[str, Tuple[int, ...]]]:
    return [(h.host, tuple(h.devices)) for h in arrangement.hosts]


def npu(host: str, device: int, reason: str = "NPU fault 80E01801 (RestartBusiness)", attempt: int = 1) -> Exclusion:
    return Exclusion(host, device, reason, attempt=attempt)


def lost(host: str, attempt: int = 1) -> Exclusion:
    return Exclusion(host, None, "host lost: the SSH connection closed", attempt=attempt)


ONE = "hosts:\n  - host: a\n    devices: [0, 1, 2, 3]\n    spare_devices: [4, 5]\n"
TWO_AND_SPARES = (
    "hosts:\n"
    "  - {host: a, devices: [0, 1]}\n"
    "  - {host: b, devices: [0, 1]}\n"
    "spares:\n"
    "  - {host: s1, devices: [0]}\n"  # too small for either host
    "  - {host: s2, devices: [2, 3]}\n"
    "  - {host: s3, devices: [0, 1]}\n"
)


# --- spare NPUs of the same host -----------------------------------------------------------------


def test_nothing_excluded_keeps_every_rank_and_holds_the_spares_back() -> None:
    config = config_of(ONE)
    assert needs_arranging(config, ())
    arrangement = arrange(config, (), resolve)
    assert placed(arrangement) == [("a", (0, 1, 2, 3))]
    assert (arrangement.changes, arrangement.spare_devices, arrangement.dropped) == ((), {"a": (4, 5)}, 0)
    assert not needs_arranging(config_of("hosts: [{host: a, devices: 2}]\n"), ())


def test_a_spare_npu_takes_the_excluded_npus_position() -> None:
    arrangement = arrange(config_of(ONE), [npu("a", 2)], resolve)
    assert placed(arrangement) == [("a", (0, 1, 4, 3))]  # position 2 (rank 2) moves; ranks 0, 1, 3 stay
    assert arrangement.changes == ("a: NPU 2 -> spare NPU 4",)
    assert arrangement.spare_devices == {"a": (5,)}
    assert arrangement.dropped == 0 and arrangement.spare_hosts == ()


def test_several_exclusions_on_one_host() -> None:
    arrangement = arrange(config_of(ONE), [npu("a", 1), npu("a", 3)], resolve)
    assert placed(arrangement) == [("a", (0, 4, 2, 5))]
    assert arrangement.changes == ("a: NPU 1 -> spare NPU 4", "a: NPU 3 -> spare NPU 5")
    assert arrangement.spare_devices == {"a": ()}


def test_an_excluded_spare_is_not_taken() -> None:
    arrangement = arrange(config_of(ONE), [npu("a", 4, attempt=1), npu("a", 2, attempt=2)], resolve)
    assert placed(arrangement) == [("a", (0, 1, 5, 3))]
    assert arrangement.spare_devices == {"a": ()}


def test_a_spare_in_use_that_fails_is_replaced_by_the_next_spare() -> None:
    # attempt 2 ran rank 2 on spare 4; then 4 failed too: rank 2 goes to 5, the others stay
    arrangement = arrange(config_of(ONE), [npu("a", 2, attempt=1), npu("a", 4, attempt=2)], resolve)
    assert placed(arrangement) == [("a", (0, 1, 5, 3))]


def test_spares_used_up_and_no_spare_host_is_no_spare() -> None:
    exclusions = [npu("a", 2), npu("a", 0), npu("a", 1, reason="NPU health Critical (SeparateNPU)")]
    with pytest.raises(NoSpare) as caught:
        arrange(config_of(ONE), exclusions, resolve)
    text = str(caught.value)
    assert isinstance(caught.value, PlanError)
    lines = text.splitlines()
    assert lines[0] == "no spare fits in place of what was excluded, so the job cannot go on:"
    assert "  excluded: a NPU 2: NPU fault 80E01801 (RestartBusiness) (attempt 1)" in lines
    assert "  excluded: a NPU 0: NPU fault 80E01801 (RestartBusiness) (attempt 1)" in lines
    assert "  excluded: a NPU 1: NPU health Critical (SeparateNPU) (attempt 1)" in lines
    assert "  a: its spare NPUs (4-5) are all used or excluded; no spare host with 4 usable NPUs either" in lines
    assert any(line.startswith("  would have fitted: a spare NPU in spare_devices of this host") for line in lines)
    assert "an entry in spares: with 4 healthy NPUs" in text
    # a is left with NPU 3: without recovery.shrink the text says what shrinking would give
    assert "  with recovery.shrink: {min_ranks: 1} (or fewer) the job would go on with 1 of its 4 ranks" in lines


def test_a_host_without_spare_npus_says_so() -> None:
    with pytest.raises(NoSpare, match="a: no spare NPU on the host; no spare host with 2 usable NPUs either"):
        arrange(config_of("hosts: [{host: a, devices: [0, 1]}]\n"), [npu("a", 1)], resolve)


def test_devices_all_holds_the_spares_back() -> None:
    config = config_of("hosts:\n  - {host: a, devices: all, spare_devices: [6, 7]}\n")
    assert placed(arrange(config, (), resolve)) == [("a", (0, 1, 2, 3, 4, 5))]
    assert placed(arrange(config, [npu("a", 3)], resolve)) == [("a", (0, 1, 2, 6, 4, 5))]


def test_an_exclusion_of_an_npu_the_job_does_not_use_changes_nothing() -> None:
    arrangement = arrange(config_of(ONE), [npu("a", 7), npu("elsewhere", 0)], resolve)
    assert placed(arrangement) == [("a", (0, 1, 2, 3))] and arrangement.changes == ()


# --- HCCL's device groups -------------------------------------------------------------------------


def test_without_a_product_a_spare_of_the_same_group_is_preferred() -> None:
    config = config_of("hosts:\n  - {host: a, devices: [0, 1], spare_devices: [5, 3]}\n")
    arrangement = arrange(config, [npu("a", 1)], resolve)
    assert placed(arrangement) == [("a", (0, 3))]  # 3 (group 0-3) over 5, though 5 is listed first
    assert arrangement.spare_devices == {"a": (5,)}


def test_without_a_product_a_spare_of_the_other_group_is_still_taken() -> None:
    config = config_of("hosts:\n  - {host: a, devices: [0, 1], spare_devices: [5]}\n")
    assert placed(arrange(config, [npu("a", 1)], resolve)) == [("a", (0, 5))]


def test_atlas_training_never_takes_a_spare_that_breaks_the_groups() -> None:
    config = config_of("product: atlas-training\nhosts:\n  - {host: a, devices: [0, 1], spare_devices: [5]}\n")
    with pytest.raises(NoSpare) as caught:
        arrange(config, [npu("a", 1)], resolve)
    text = str(caught.value)
    assert "a: no spare NPU (5) keeps HCCL's device groups (0-3, 4-7)" in text
    assert "in the same group as the others (0-3 or 4-7)" in text


def test_atlas_training_takes_the_spare_that_keeps_the_groups() -> None:
    config = config_of(
        "product: atlas-training\n"
        "hosts:\n"
        "  - {host: a, devices: [4, 5, 6, 7], spare_devices: [2, 3]}\n"
        "  - {host: b, devices: [4, 5, 6, 7]}\n"
    )
    with pytest.raises(NoSpare):  # 2 and 3 are outside a's group 4-7
        arrange(config, [npu("a", 5)], resolve)
    config = config_of(
        "product: atlas-training\n"
        "hosts:\n"
        "  - {host: a, devices: [0, 1], spare_devices: [4, 2]}\n"
        "  - {host: b, devices: [0, 1]}\n"
    )
    arrangement = arrange(config, [npu("a", 0)], resolve)
    assert placed(arrangement) == [("a", (2, 1)), ("b", (0, 1))]
    assert arrangement.spare_devices == {"a": (4,), "b": ()}


def test_atlas_training_a_host_whose_spares_break_the_groups_gets_a_spare_host() -> None:
    config = config_of(
        "product: atlas-training\n"
        "hosts:\n"
        "  - {host: a, devices: [0, 1, 2, 3], spare_devices: [4]}\n"
        "spares:\n"
        "  - {host: s, devices: [3, 4, 5, 6, 7]}\n"
    )
    arrangement = arrange(config, [npu("a", 0)], resolve)
    # the first four of s (3-6) span both groups: 4-7 is taken
    assert placed(arrangement) == [("s", (4, 5, 6, 7))]
    assert arrangement.spare_hosts == ()
    assert len(arrangement.changes) == 1 and arrangement.changes[0].startswith("a (no spare NPU (4) keeps HCCL's")
    assert arrangement.changes[0].endswith("-> spare host s NPUs 4-7")


def test_without_a_product_a_spare_host_gives_its_first_npus() -> None:
    config = config_of("hosts:\n  - {host: a, devices: [0, 1]}\nspares:\n  - {host: s, devices: [3, 4, 5]}\n")
    assert placed(arrange(config, [lost("a")], resolve)) == [("s", (3, 4))]
    training = config_of(
        "product: atlas-training\nhosts:\n  - {host: a, devices: [0, 1]}\nspares:\n  - {host: s, devices: [3, 4, 5]}\n"
    )
    assert placed(arrange(training, [lost("a")], resolve)) == [("s", (4, 5))]


# --- spare hosts -----------------------------------------------------------------------------------


def test_a_lost_host_is_replaced_in_its_position_by_the_first_spare_host_big_enough() -> None:
    arrangement = arrange(config_of(TWO_AND_SPARES), [lost("a")], resolve)
    assert placed(arrangement) == [("s2", (2, 3)), ("b", (0, 1))]  # s1 has one NPU: s2, in a's place (index 0)
    assert arrangement.changes == ("a (the host is excluded) -> spare host s2 NPUs 2-3",)
    assert arrangement.spare_hosts == ("s1", "s3")
    assert "a" not in arrangement.spare_devices


def test_a_host_whose_spare_npus_do_not_suffice_gets_a_spare_host() -> None:
    config = config_of(
        "hosts:\n"
        "  - {host: a, devices: [0, 1]}\n"
        "  - {host: b, devices: [0, 1], spare_devices: [2]}\n"
        "spares:\n"
        "  - {host: s, devices: [4, 5]}\n"
    )
    arrangement = arrange(config, [npu("b", 0), npu("b", 1)], resolve)
    assert placed(arrangement) == [("a", (0, 1)), ("s", (4, 5))]
    assert arrangement.changes == ("b (its spare NPUs (2) are all used or excluded) -> spare host s NPUs 4-5",)


def test_a_spare_host_with_an_excluded_npu_is_used_only_if_enough_are_left() -> None:
    config = config_of("hosts:\n  - {host: a, devices: [0, 1]}\nspares:\n  - {host: s, devices: [0, 1, 2]}\n")
    assert placed(arrange(config, [npu("s", 1), lost("a")], resolve)) == [("s", (0, 2))]
    with pytest.raises(NoSpare, match="excluded: host a"):
        arrange(config, [npu("s", 1), npu("s", 2), lost("a")], resolve)
    with pytest.raises(NoSpare, match="excluded: host s"):
        arrange(config, [lost("s"), lost("a")], resolve)


def test_two_hosts_lost_take_two_spare_hosts() -> None:
    arrangement = arrange(config_of(TWO_AND_SPARES), [lost("a"), lost("b")], resolve)
    assert placed(arrangement) == [("s2", (2, 3)), ("s3", (0, 1))]
    assert arrangement.spare_hosts == ("s1",)


def test_no_spare_host_left_lists_everything() -> None:
    exclusions = [lost("a", attempt=1), Exclusion("b", 1, "rank 3: EL0004 (device_memory_fault)", attempt=2)]
    config = config_of(TWO_AND_SPARES.replace("  - {host: s3, devices: [0, 1]}\n", ""))
    with pytest.raises(NoSpare) as caught:
        arrange(config, exclusions, resolve)
    lines = str(caught.value).splitlines()
    assert "  excluded: host a: host lost: the SSH connection closed (attempt 1)" in lines
    assert "  excluded: b NPU 1: rank 3: EL0004 (device_memory_fault) (attempt 2)" in lines
    assert "  b: no spare NPU on the host; no spare host with 2 usable NPUs either" in lines
    assert sum(line.startswith("  would have fitted:") for line in lines) == 1  # for b: s2 took a's place
    assert "  with recovery.shrink: {min_ranks: 2} (or fewer) the job would go on with 2 of its 4 ranks" in lines


def test_no_spare_for_a_lost_host_offers_only_a_spare_host() -> None:
    config = config_of("hosts:\n  - {host: a, devices: [0, 1]}\n  - {host: b, devices: [0, 1]}\n")
    with pytest.raises(NoSpare) as caught:
        arrange(config, [lost("a")], resolve)
    fitted = [line for line in str(caught.value).splitlines() if line.startswith("  would have fitted:")]
    assert fitted == ["  would have fitted: an entry in spares: with 2 healthy NPUs"]


def test_a_spare_hosts_own_spare_devices_are_refused_or_held_back() -> None:
    text = "hosts:\n  - {host: a, devices: 8}\nspares:\n  - {host: s, spare_devices: [7]}\n"
    try:
        config = config_of(text)
    except ConfigError:
        return
    with pytest.raises(NoSpare):  # s has 7 NPUs besides its held-back one: not enough for a's 8
        arrange(config, [lost("a")], resolve)


# --- shrink ---------------------------------------------------------------------------------------


def four_by_two(extra: str = "") -> ClusterConfig:
    return config_of("hosts:\n  - {host: a, devices: [0, 1, 2, 3]}\n  - {host: b, devices: [0, 1, 2, 3]}\n" + extra)


def test_shrink_keeps_equal_counts_when_that_is_bigger() -> None:
    arrangement = arrange(four_by_two("recovery: {shrink: {min_ranks: 4}}\n"), [npu("a", 1)], resolve)
    # equal counts: 3 + 3 = 6 ranks; dropping a: 4 ranks
    assert placed(arrangement) == [("a", (0, 2, 3)), ("b", (0, 1, 2))]
    assert arrangement.dropped == 2
    assert arrangement.changes == ("a: NPUs 0, 2-3 only (recovery.shrink)", "b: NPUs 0-2 only (recovery.shrink)")


def test_shrink_drops_the_broken_hosts_when_that_is_bigger() -> None:
    config = config_of(
        "hosts:\n"
        "  - {host: a, devices: [0, 1, 2, 3]}\n"
        "  - {host: b, devices: [0, 1, 2, 3]}\n"
        "  - {host: c, devices: [0, 1, 2, 3]}\n"
        "recovery: {shrink: {min_ranks: 1}}\n"
    )
    arrangement = arrange(config, [npu("a", 0), npu("a", 1), npu("a", 2)], resolve)
    # equal counts: 1 + 1 + 1 = 3; dropping a: 8
    assert placed(arrangement) == [("b", (0, 1, 2, 3)), ("c", (0, 1, 2, 3))]
    assert arrangement.dropped == 4
    assert arrangement.changes == ("a: dropped (4 ranks; recovery.shrink)",)


def test_shrink_a_tie_drops_the_hosts() -> None:
    config = config_of(
        "hosts:\n  - {host: a, devices: [0, 1]}\n  - {host: b, devices: [0, 1]}\nrecovery: {shrink: {min_ranks: 2}}\n"
    )
    arrangement = arrange(config, [npu("a", 1)], resolve)  # equal counts: 1 + 1; dropping a: 2
    assert placed(arrangement) == [("b", (0, 1))]
    assert arrangement.dropped == 2


def test_shrink_on_atlas_training_keeps_a_valid_group() -> None:
    config = config_of(
        "product: atlas-training\n"
        "hosts:\n  - {host: a, devices: [0, 1, 2, 3]}\n  - {host: b, devices: [0, 1, 2, 3]}\n"
        "recovery: {shrink: {min_ranks: 4}}\n"
    )
    both = arrange(config, [npu("a", 1), npu("b", 2)], resolve)
    # 3 NPUs left on each: 3 is no valid count, 2 within one group is
    assert placed(both) == [("a", (0, 2)), ("b", (0, 1))]
    assert both.dropped == 4
    one = arrange(config, [npu("a", 1)], resolve)  # equal: 2 + 2; dropping a: 4: a tie drops the host
    assert placed(one) == [("b", (0, 1, 2, 3))]


def test_shrink_below_min_ranks_is_no_spare() -> None:
    config = four_by_two("recovery: {shrink: {min_ranks: 7}}\n")
    with pytest.raises(NoSpare) as caught:
        arrange(config, [npu("a", 1)], resolve)
    assert (
        "  recovery.shrink allows no fewer than 7 ranks; the biggest valid smaller job has 6"
        in str(caught.value).splitlines()
    )
    assert "  excluded: a NPU 1: NPU fault 80E01801 (RestartBusiness) (attempt 1)" in str(caught.value)


def test_shrink_after_a_lost_host() -> None:
    arrangement = arrange(four_by_two("recovery: {shrink: {min_ranks: 4}}\n"), [lost("b")], resolve)
    assert placed(arrangement) == [("a", (0, 1, 2, 3))] and arrangement.dropped == 4


def test_a_spare_is_used_before_shrinking() -> None:
    config = config_of(
        "hosts:\n  - {host: a, devices: [0, 1], spare_devices: [2]}\n  - {host: b, devices: [0, 1]}\n"
        "recovery: {shrink: {min_ranks: 1}}\n"
    )
    arrangement = arrange(config, [npu("a", 0)], resolve)
    assert placed(arrangement) == [("a", (2, 1)), ("b", (0, 1))] and arrangement.dropped == 0


# --- device_ips -------------------------------------------------------------------------------------


def test_device_ips_follow_the_devices_to_the_spares_addresses() -> None:
    config = config_of(
        "hosts:\n"
        "  - host: a\n"
        "    devices: [0, 1, 2, 3]\n"
        "    spare_devices: [4, 5]\n"
        "    device_ips: [10.0.0.0, 10.0.0.1, 10.0.0.2, 10.0.0.3, 10.0.0.4, 10.0.0.5]\n"
    )
    host = arrange(config, [npu("a", 2), npu("a", 0)], resolve).hosts[0]
    assert host.devices == (5, 1, 4, 3)  # in the order they were excluded: 2 took spare 4 first
    assert host.device_ips == ("10.0.0.5", "10.0.0.1", "10.0.0.4", "10.0.0.3")


def test_without_the_spares_addresses_the_moved_host_has_none() -> None:
    config = config_of(
        "hosts:\n  - host: a\n    devices: [0, 1]\n    spare_devices: [2]\n    device_ips: [10.0.0.0, 10.0.0.1]\n"
    )
    untouched = arrange(config, (), resolve).hosts[0]
    assert untouched.device_ips == ("10.0.0.0", "10.0.0.1")
    moved = arrange(config, [npu("a", 1)], resolve).hosts[0]
    assert (moved.devices, moved.device_ips) == ((0, 2), None)  # left to discovery (hccn_tool)


def test_a_spare_hosts_addresses_follow_the_npus_it_gives() -> None:
    config = config_of(
        "product: atlas-training\n"
        "hosts:\n  - {host: a, devices: [0, 1]}\n"
        "spares:\n  - {host: s, devices: [3, 4, 5], device_ips: [10.1.0.3, 10.1.0.4, 10.1.0.5]}\n"
    )
    host = arrange(config, [lost("a")], resolve).hosts[0]
    assert (host.host, host.devices, host.device_ips) == ("s", (4, 5), ("10.1.0.4", "10.1.0.5"))


def test_a_shrunk_host_keeps_the_addresses_of_its_npus() -> None:
    config = config_of(
        "hosts:\n"
        "  - {host: a, devices: [0, 1, 2], device_ips: [10.0.0.0, 10.0.0.1, 10.0.0.2]}\n"
        "  - {host: b, devices: [0, 1, 2], device_ips: [10.0.1.0, 10.0.1.1, 10.0.1.2]}\n"
        "recovery: {shrink: {min_ranks: 2}}\n"
    )
    hosts = arrange(config, [npu("a", 0)], resolve).hosts
    assert [(h.devices, h.device_ips) for h in hosts] == [
        ((1, 2), ("10.0.0.1", "10.0.0.2")),
        ((0, 1), ("10.0.1.0", "10.0.1.1")),
    ]


# --- determinism ------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", [ONE, TWO_AND_SPARES])
def test_the_same_exclusions_give_the_same_arrangement(text: str) -> None:
    exclusions = [npu("a", 2)] if text == ONE else [lost("a"), npu("b", 0)]
    first = arrange(config_of(text), exclusions, resolve)
    assert first == arrange(config_of(text), list(exclusions), resolve)


def test_a_later_exclusion_on_another_host_keeps_earlier_replacements() -> None:
    config = config_of(
        "hosts:\n"
        "  - {host: a, devices: [0, 1], spare_devices: [2]}\n"
        "  - {host: b, devices: [0, 1], spare_devices: [2]}\n"
    )
    before = arrange(config, [npu("a", 0, attempt=1)], resolve)
    after = arrange(config, [npu("a", 0, attempt=1), npu("b", 1, attempt=2)], resolve)
    assert placed(before) == [("a", (2, 1)), ("b", (0, 1))]
    assert placed(after) == [("a", (2, 1)), ("b", (0, 2))]


def test_a_later_exclusion_on_the_same_host_keeps_earlier_replacements() -> None:
    config = config_of(ONE)
    before = arrange(config, [npu("a", 2, attempt=1)], resolve)
    assert placed(before) == [("a", (0, 1, 4, 3))]
    after = arrange(config, [npu("a", 2, attempt=1), npu("a", 0, attempt=2)], resolve)
    assert placed(after) == [("a", (5, 1, 4, 3))]


def test_a_later_lost_host_keeps_earlier_spare_hosts() -> None:
    config = config_of(TWO_AND_SPARES)
    before = arrange(config, [npu("b", 1, attempt=1)], resolve)
    assert placed(before) == [("a", (0, 1)), ("s2", (2, 3))]
    after = arrange(config, [npu("b", 1, attempt=1), lost("a", attempt=2)], resolve)
    assert placed(after) == [("s3", (0, 1)), ("s2", (2, 3))]


def test_exclusion_round_trips_through_json() -> None:
    exclusion = Exclusion("a", 3, "NPU fault 80E01801 (RestartBusiness)", "80E01801", "RestartBusiness", 2)
    assert Exclusion.from_json(exclusion.to_json()) == exclusion
    assert Exclusion.from_json(lost("h", attempt=4).to_json()) == lost("h", attempt=4)
    assert (exclusion.what, lost("h").what) == ("a NPU 3", "host h")


# --- through build_plan -------------------------------------------------------------------------------

NO_NPU_TOOLS = Discovery(devices=lambda: [], device_ips=lambda ids: None, environ=lambda: {})
LOCAL = (
    "hosts:\n"
    "  - host: localhost\n"
    "    devices: [0, 1, 2, 3]\n"
    "    spare_devices: [4, 5]\n"
    "    device_ips: [10.0.0.0, 10.0.0.1, 10.0.0.2, 10.0.0.3, 10.0.0.4, 10.0.0.5]\n"
    "recovery:\n"
    "  checkpoint_dir: ckpt/{rank}\n"
)


@pytest.mark.parametrize("attempt, restarts", [(0, "0"), (1, "0"), (2, "1"), (4, "3")])
def test_build_plan_puts_the_excluded_npus_rank_on_the_spare(attempt: int, restarts: str) -> None:
    config = config_of(LOCAL)
    before = build_plan(config, "job-1", "uuid-1", NO_NPU_TOOLS)
    plan = build_plan(
        config, "job-1", "uuid-1", NO_NPU_TOOLS, attempt=attempt, exclusions=[Exclusion("localhost", 2, "x")]
    )
    assert [(r.rank, r.device_id) for r in before.ranks] == [(0, 0), (1, 1), (2, 2), (3, 3)]
    assert [(r.rank, r.local_rank, r.device_id) for r in plan.ranks] == [(0, 0, 0), (1, 1, 1), (2, 2, 4), (3, 3, 3)]
    assert plan.world_size == 4
    assert {r.env["RANK_SIZE"] for r in plan.ranks} == {"4"}
    assert [r.env["RANK_ID"] for r in plan.ranks] == ["0", "1", "2", "3"]
    assert plan.ranks[2].env["DEVICE_ID"] == "4"
    assert {r.env["NPULAUNCH_RESTART_COUNT"] for r in plan.ranks} == {restarts}
    assert {r.env["NPULAUNCH_RESTART_COUNT"] for r in before.ranks} == {"0"}
    assert plan.recovery["changes"] == ["localhost: NPU 2 -> spare NPU 4"]
    assert plan.recovery["spare_devices"] == {"localhost": [5]}
    assert plan.recovery["spare_hosts"] == [] and plan.recovery["dropped"] == 0
    assert plan.recovery["excluded"] == [
        {"host": "localhost", "device": 2, "reason": "x", "code": None, "level": None, "attempt": 0}
    ]
    assert (plan.recovery["max_recoveries"], plan.recovery["checkpoint_dir"]) == (3, "ckpt/{rank}")
    assert "recovery: localhost: NPU 2 -> spare NPU 4" in plan.notes
    assert before.recovery["excluded"] == [] and before.recovery["changes"] == []
    assert before.recovery["spare_devices"] == {"localhost": [4, 5]}
    # the rank table names the spare with its own address, rank 2 still
    table = plan.rank_table
    assert table is not None
    devices = table["server_list"][0]["device"]
    assert [(d["device_id"], d["device_ip"], d["rank_id"]) for d in devices] == [
        ("0", "10.0.0.0", "0"),
        ("1", "10.0.0.1", "1"),
        ("4", "10.0.0.4", "2"),
        ("3", "10.0.0.3", "3"),
    ]
    # the health watch watches the spare, not the excluded NPU
    watch = plan.health_watch(0)
    assert watch is not None and watch["devices"] == [0, 1, 3, 4]


def test_build_plan_without_a_spare_raises_no_spare() -> None:
    config = config_of("hosts: [{host: localhost, devices: [0, 1]}]\n")
    with pytest.raises(NoSpare, match="excluded: localhost NPU 1: x"):
        build_plan(config, "job-1", "uuid-1", NO_NPU_TOOLS, attempt=2, exclusions=[Exclusion("localhost", 1, "x")])


def test_build_plan_with_a_spare_host() -> None:
    config = config_of(
        "hosts:\n  - {host: localhost, devices: [0, 1]}\n  - {host: 10.0.0.2, devices: [0, 1]}\n"
        "spares:\n  - {host: 10.0.0.9, devices: [6, 7]}\nrank_table: none\n"
    )
    plan = build_plan(
        config, "job-1", "uuid-1", NO_NPU_TOOLS, attempt=2, exclusions=[Exclusion("10.0.0.2", None, "lost")]
    )
    assert plan.hosts == ("localhost", "10.0.0.9")
    assert [(r.rank, r.host, r.node_rank, r.device_id) for r in plan.ranks] == [
        (0, "localhost", 0, 0),
        (1, "localhost", 0, 1),
        (2, "10.0.0.9", 1, 6),
        (3, "10.0.0.9", 1, 7),
    ]
    assert plan.recovery["spare_hosts"] == []
    assert plan.recovery["changes"] == ["10.0.0.2 (the host is excluded) -> spare host 10.0.0.9 NPUs 6-7"]


def test_devices_from_the_command_line_that_were_spares_are_used_not_held_back(tmp_path) -> None:
    from npulaunch.config.load import load_config
    from npulaunch.config.overrides import Overrides, apply_overrides

    path = tmp_path / "job.yaml"
    path.write_text('job: {command: ["true"]}\nhosts:\n  - {host: localhost, devices: [0, 1], spare_devices: [2, 3]}\n')
    config = apply_overrides(load_config(str(path)), Overrides(nproc_per_node=3))
    (host,) = config.hosts
    assert (host.devices, host.spare_devices) == ((0, 1, 2), (3,))
    assert arrange(config, (), resolve).hosts[0].devices == (0, 1, 2)


def test_plan_shows_the_spares_and_the_watch(tmp_path: Path) -> None:
    from helpers import run_cli

    # a log_dir of its own: the fault history of the example's real runs (../npulaunch-logs) stays out of it
    result = run_cli("plan", "cluster_configs/local-4-recovery.yaml", "--log-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert (
        "spares: localhost NPU 4 (recovery: at most 3 faults, resuming from output/{job_id}/{device_id}/ckpt)" in lines
    )
    assert "health watch: every 1 s (monitor.health_interval_s)" in lines
