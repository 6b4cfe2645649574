"""The simulated kubelet: runs the pods bound to the simulated nodes as local processes.
Design notes: docs/simulated-nodes.md.
"""

from .env import ConfigError, expand
from .kubelet import Kubelet
from .logs import LogError, LogOptions
from .network import IPAllocator
from .worker import STAND_IN_ANNOTATION, TERMINATION_LOG_ENV, ExecError, PodWorker

__all__ = ["Kubelet", "PodWorker", "IPAllocator", "ConfigError", "expand", "ExecError", "LogError", "LogOptions",
           "STAND_IN_ANNOTATION", "TERMINATION_LOG_ENV"]
