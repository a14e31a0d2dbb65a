"""The metric names the fleet reads, as plain strings (from the table the exporter writes by,
:mod:`gputui.core.metric_names`): the queries are built from them, and the join's loops compare
thousands of samples' names with them."""

from __future__ import annotations

from gputui.core import metric_names

ALERT_ACTIVE = metric_names.ALERT_ACTIVE.name
CONTAINER_FINDING = metric_names.CONTAINER_FINDING.name
CONTAINER_GPU_GRANTED = metric_names.CONTAINER_GPU_GRANTED.name
DCGM_FB_FREE = metric_names.DCGM_FB_FREE.name
DCGM_FB_RESERVED = metric_names.DCGM_FB_RESERVED.name
DCGM_FB_USED = metric_names.DCGM_FB_USED.name
DCGM_GPU_TEMP = metric_names.DCGM_GPU_TEMP.name
DCGM_GPU_UTIL = metric_names.DCGM_GPU_UTIL.name
GPU_INFO = metric_names.GPU_INFO.name
GPU_LOST = metric_names.GPU_LOST.name
GPU_MEMORY_TOTAL = metric_names.GPU_MEMORY_TOTAL.name
GPU_MEMORY_USED = metric_names.GPU_MEMORY_USED.name
GPU_TEMPERATURE = metric_names.GPU_TEMPERATURE.name
GPU_UTILIZATION = metric_names.GPU_UTILIZATION.name
HOST_INFO = metric_names.HOST_INFO.name
IMBALANCE_FLAGGED = metric_names.IMBALANCE_FLAGGED.name
PROCESS_GPU_MEMORY = metric_names.PROCESS_GPU_MEMORY.name
STALE_GPU_MEMORY = metric_names.STALE_GPU_MEMORY.name
STALE_PROCESSES = metric_names.STALE_PROCESSES.name
SLURM_JOB_INFO = metric_names.SLURM_JOB_INFO.name
RULE_VIOLATION = metric_names.RULE_VIOLATION.name
RESERVATION = metric_names.RESERVATION.name
