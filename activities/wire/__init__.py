"""What crosses the Temporal boundary: workflow and task queue names, search attributes, and
the one input/result model of each workflow and activity.

Workflows (a layer up) and activities both import it; it imports only bigfleet/ below.
Everything here travels as JSON through Temporal's pydantic data converter: the class names
and fields are the contract (recorded histories replay against them), the module a class is
in is not.

A module per workflow its types cross to: shard.py, transitions.py, mailbox.py,
coordinator.py (its instructions and sagas included), providers.py (the provider and operator
activities), with search.py (the search attributes) and base.py (`Model`). This package is
their one import point: a workflow and the activities it calls share most of them, and
`from activities.wire import X` keeps the boundary one place to look (docs/design.md,
"Layers"; decision 0007).
"""

from .base import (
    Model,
)
from .coordinator import (
    COORDINATOR_ID,
    CoordinatorInput,
    CoordinatorTerm,
    DecommissionRequest,
    EscalateDrains,
    Instruction,
    MembershipInput,
    MembershipResult,
    SagaInput,
    SagaResult,
    ShardCall,
    SplitInstruction,
    TakeIn,
)
from .mailbox import (
    MailboxInput,
    MailboxTake,
    TakenResults,
    mailbox_workflow_id,
)
from .providers import (
    CAPACITY_GONE,
    ELSEWHERE_MAX,
    LIST_PAGE,
    BootstrapAnswer,
    BootstrapCall,
    CapacityDiff,
    CapacityRead,
    MachinePage,
    ProviderCall,
    ProviderRead,
    provider_task_queue,
)
from .search import (
    CLUSTER,
    MACHINE_IDS,
    PROVIDER,
    RESULT_STATE,
    SEARCH_ATTRIBUTES,
    SHARD,
    TRANSITION,
)
from .shard import (
    SHARD_TASK_QUEUE,
    SHARD_TASK_TIMEOUT,
    AdoptCursor,
    BuildMove,
    RecordBatch,
    ResetGeneration,
    ShardConfig,
    ShardInput,
    SnapshotPart,
    SnapshotRef,
    build_queue,
    queue_build,
    shard_task_timeout,
    shard_workflow_id,
)
from .transitions import (
    ID_WHERE_BYTES,
    TRANSITION_TASK_QUEUE,
    WORKFLOW_ID_BYTES,
    FenceRefusal,
    TransitionInput,
    TransitionResult,
    transition_workflow_id,
)

__all__ = [
    "CAPACITY_GONE",
    "CLUSTER",
    "COORDINATOR_ID",
    "ELSEWHERE_MAX",
    "ID_WHERE_BYTES",
    "LIST_PAGE",
    "MACHINE_IDS",
    "PROVIDER",
    "RESULT_STATE",
    "SEARCH_ATTRIBUTES",
    "SHARD",
    "SHARD_TASK_QUEUE",
    "SHARD_TASK_TIMEOUT",
    "build_queue",
    "queue_build",
    "TRANSITION",
    "TRANSITION_TASK_QUEUE",
    "WORKFLOW_ID_BYTES",
    "AdoptCursor",
    "BuildMove",
    "RecordBatch",
    "BootstrapAnswer",
    "BootstrapCall",
    "CapacityDiff",
    "CapacityRead",
    "CoordinatorInput",
    "CoordinatorTerm",
    "DecommissionRequest",
    "EscalateDrains",
    "Instruction",
    "MachinePage",
    "MailboxInput",
    "MailboxTake",
    "MembershipInput",
    "MembershipResult",
    "Model",
    "ProviderCall",
    "ProviderRead",
    "SagaInput",
    "SagaResult",
    "ShardCall",
    "ResetGeneration",
    "ShardConfig",
    "ShardInput",
    "SnapshotPart",
    "SnapshotRef",
    "SplitInstruction",
    "TakeIn",
    "TakenResults",
    "TransitionInput",
    "TransitionResult",
    "FenceRefusal",
    "mailbox_workflow_id",
    "provider_task_queue",
    "shard_task_timeout",
    "shard_workflow_id",
    "transition_workflow_id",
]
