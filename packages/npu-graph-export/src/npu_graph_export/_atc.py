"""ATC configuration templates for multi-rank exports (``auto_atc_config_generated``).

These are starting points: users edit node ids, IPs and device lists for their cluster (see
the CANN ATC guide, ``--model_relation_config`` and ``--cluster_config``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any


def model_relation_config(
    export_name: str, world_ranks: Sequence[int], groups: Mapping[str, Sequence[int]]
) -> dict[str, Any]:
    """Which ``.air`` runs on which device, and the communication groups between them."""
    return {
        "deploy_config": [
            {"submodel_name": f"{export_name}{rank}.air", "deploy_device_id_list": f"0:0:{rank}"}
            for rank in world_ranks
        ],
        "model_name_to_instance_id": [
            {"submodel_name": f"{export_name}{rank}.air", "model_instance_id": rank}
            for rank in world_ranks
        ],
        "comm_group": [
            {"group_name": name, "group_rank_list": str(list(ranks))}
            for name, ranks in groups.items()
        ],
        "rank_table": [{"rank_id": rank, "model_instance_id": rank} for rank in world_ranks],
    }


def numa_config(world_ranks: Sequence[int]) -> dict[str, Any]:
    """A one-node cluster topology listing every rank as an item (edit for real clusters)."""
    return {
        "cluster": [
            {
                "cluster_nodes": [
                    {
                        "node_id": 0,
                        "node_type": "ATLAS800",
                        "ipaddr": "127.0.0.1",
                        "port": 29500,
                        "item_list": [{"item_id": rank} for rank in world_ranks],
                    }
                ],
                "nodes_toplogy": {},
            }
        ],
        "item_def": [{"item_type": "Ascend910"}],
        "node_def": [{"item": [{"item_type": "Ascend910"}]}],
    }


def to_json(document: Mapping[str, Any]) -> bytes:
    """Serialise a config document the way ATC's examples are written (indented UTF-8)."""
    return (json.dumps(document, indent=2, ensure_ascii=False) + "\n").encode()
