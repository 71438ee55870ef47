"""The key scheme: every atomic step of the Valkey store touches one hash slot (a Valkey Cluster
refuses anything else), and the slot is found from what a request carries."""

from __future__ import annotations

import re

import pytest
from valkey.crc import VALKEY_CLUSTER_HASH_SLOTS, key_slot

from ext_tasks.store.ids import (
    LEGACY_PARTITION,
    PARTITION_TAGS,
    PARTITIONS,
    new_task_id,
    partition_of,
    partition_of_key,
)
from ext_tasks.store.valkey.keys import KeySchema

KEYS = KeySchema(prefix="ext-tasks")


def slot(key: str) -> int:
    return key_slot(key.encode())


def test_partition_tags_spread_evenly_over_the_slot_space() -> None:
    # A cluster whose primaries split the slots evenly then splits the partitions evenly too.
    width = VALKEY_CLUSTER_HASH_SLOTS // PARTITIONS
    assert len(PARTITION_TAGS) == len(set(PARTITION_TAGS)) == PARTITIONS
    for n, tag in enumerate(PARTITION_TAGS):
        assert n * width <= slot(KEYS.runs(tag)) < (n + 1) * width, tag


@pytest.mark.parametrize("partition", [None, *PARTITION_TAGS])
def test_every_key_of_a_task_shares_its_partitions_slot(partition: str | None) -> None:
    task_id = new_task_id(partition)
    tag = partition_of(task_id)
    assert partition is None or tag == partition
    slots = {slot(KEYS.task(task_id)), slot(KEYS.tombstone(task_id)), slot(KEYS.task_channel(task_id))}
    assert slots == {slot(KEYS.runs(tag))}


def test_task_ids_carry_the_tag_and_at_least_128_random_bits() -> None:
    ids = {new_task_id() for _ in range(2000)}
    assert len(ids) == 2000
    for task_id in ids:
        tag, rest = task_id.split(".", 1)
        assert tag in PARTITION_TAGS
        assert re.fullmatch(r"[A-Za-z0-9_-]{24}", rest)  # 24 url-safe characters: 144 bits
    # Random partitions, all of them used.
    assert {partition_of(task_id) for task_id in ids} == set(PARTITION_TAGS)


def test_an_idempotency_key_lands_on_the_slot_of_the_task_created_under_it() -> None:
    for n in range(200):
        scoped = f"principal-{n % 7}\x00key-{n}"
        task_id = new_task_id(partition_of_key(scoped))
        assert slot(KEYS.idempotency(scoped)) == slot(KEYS.task(task_id))
        # Stable: every resend, on any instance, picks the same partition.
        assert partition_of_key(scoped) == partition_of_key(scoped)


@pytest.mark.parametrize(
    "task_id",
    [
        "7b0c9f0e-6a51-4a57-9d6e-2f4a3c1b8e90",  # an id of an earlier version (no tag)
        "zz.not-a-partition",
        "bd.",
        "bd",
        ".bd",
        "{bd}.x",
    ],
)
def test_ids_without_a_known_tag_keep_their_own_slot(task_id: str) -> None:
    assert partition_of(task_id) == LEGACY_PARTITION
    # Record, tombstone and channel still share one slot: the id's own.
    assert len({slot(KEYS.task(task_id)), slot(KEYS.tombstone(task_id)), slot(KEYS.task_channel(task_id))}) == 1


def test_a_principals_places_are_one_key_whatever_the_principal_looks_like() -> None:
    for owner in ["alice", "x" * 10_000, "{bd}", "a:b:c", "ünïcode"]:
        key = KEYS.owner_places(owner)
        assert len(key) < 64
        assert key == KEYS.owner_places(owner)
    assert KEYS.owner_places("alice") != KEYS.owner_places("bob")


def test_a_principals_byte_charges_share_the_slot_of_its_places() -> None:
    # The byte budget is checked and charged in the same script as the count caps: one slot.
    for owner in ["alice", "x" * 10_000, "{bd}", "ünïcode"]:
        assert slot(KEYS.owner_bytes(owner)) == slot(KEYS.owner_places(owner))
        assert KEYS.owner_bytes(owner) != KEYS.owner_places(owner)
