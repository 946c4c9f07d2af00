"""The queue section of a plan (allox) as wire records, written from its arrays: each job's
`JobAllocation.queue` and every device's `Plan.device_queues` entry, with no message built per
entry (a 100,000-job plan has 145,000 of them: 0.75 s as messages). Parsing the records gives
the messages a message-by-message builder makes (tested on random queue plans)."""

from __future__ import annotations

from collections.abc import Sequence

from apportion.server.wire_fields import Fields, Texts, records
from apportion.solver.queue_plan import QueueSection, take_rows
from apportion.v1 import allocation_service_pb2 as service_pb

_PLACE = service_pb.QueueAssignment
_QUEUE = service_pb.DeviceQueue


def job_queue_fields(section: QueueSection, type_names: Sequence[str]) -> Fields:
    """The `JobAllocation.queue` field of every job (set for the jobs with a place)."""
    queued = section.queued()
    place = Fields(queued.size)
    place.string(_PLACE.ACCELERATOR_TYPE_FIELD_NUMBER, Texts(type_names),
                 section.type_index[queued])
    offsets = section.job_device_offsets
    own, item = take_rows(offsets, queued)
    place.packed_varints(_PLACE.DEVICES_FIELD_NUMBER, own,
                         section.device_local[section.job_devices[item]])
    node_offsets, nodes = section.job_nodes()
    own, item = take_rows(node_offsets, queued)
    place.strings(_PLACE.NODES_FIELD_NUMBER, Texts(section.node_names), own, nodes[item])
    place.varint(_PLACE.POSITION_FIELD_NUMBER, section.position[queued])
    place.double(_PLACE.START_TIME_S_FIELD_NUMBER, section.start_time_s[queued])
    place.double(_PLACE.COMPLETION_TIME_S_FIELD_NUMBER, section.completion_time_s[queued])
    place.varint(_PLACE.START_NOW_FIELD_NUMBER, section.start_now[queued])
    place.varint(_PLACE.RUNNING_FIELD_NUMBER, section.running[queued])
    jobs = Fields(section.num_jobs)
    jobs.message(service_pb.JobAllocation.QUEUE_FIELD_NUMBER, section.type_index >= 0, place)
    return jobs


def device_queue_records(section: QueueSection, type_names: Sequence[str],
                         ids: Sequence[str]) -> bytes:
    """Every device's queue as serialized `Plan.device_queues` records."""
    queue = Fields(section.num_devices)
    queue.string(_QUEUE.ACCELERATOR_TYPE_FIELD_NUMBER, Texts(type_names), section.device_type)
    queue.varint(_QUEUE.DEVICE_FIELD_NUMBER, section.device_local)
    queue.string(_QUEUE.NODE_FIELD_NUMBER, Texts(section.node_names), section.device_node)
    queue.double(_QUEUE.FREE_AT_S_FIELD_NUMBER, section.free_at_s)
    job_ids = Texts(ids)
    queue.string(_QUEUE.RUNNING_JOB_ID_FIELD_NUMBER, job_ids, section.running_job)
    queue.strings(_QUEUE.JOB_IDS_FIELD_NUMBER, job_ids, section.queue_offsets,
                  section.queued_jobs)
    own, item = take_rows(section.dual_offsets, section.dual_group)
    queue.packed_doubles(_QUEUE.POSITION_DUALS_FIELD_NUMBER, own, section.position_duals[item])
    return records(service_pb.Plan.DEVICE_QUEUES_FIELD_NUMBER, queue)

