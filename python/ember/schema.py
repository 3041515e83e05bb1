"""The ExecuTorch program schema (``schema/program.fbs``, ``ET12``) as Python dataclasses.

Only what Ember writes is modelled; field names follow the schema. See
``docs/pte-format.md`` section 3 for slot numbers and defaults.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# KernelTypes union tags.
K_NULL, K_INT, K_BOOL, K_DOUBLE, K_TENSOR, K_STRING = 1, 2, 3, 4, 5, 6
K_INTLIST, K_DOUBLELIST, K_BOOLLIST, K_TENSORLIST, K_OPTTENSORLIST = 7, 8, 9, 10, 11
# InstructionArguments union tags.
I_KERNEL, I_DELEGATE, I_MOVE, I_JUMPFALSE, I_FREE = 1, 2, 3, 4, 5
# Enums.
STATIC, DYNAMIC_BOUND = 0, 1
LOC_SEGMENT, LOC_EXTERNAL = 0, 1


@dataclass
class AllocationDetails:
    memory_id: int
    memory_offset_low: int
    memory_offset_high: int = 0


@dataclass
class ExtraTensorInfo:
    mutable_data_segments_idx: int = 0
    fully_qualified_name: str | None = None
    location: int = LOC_SEGMENT


@dataclass
class Tensor:
    scalar_type: int
    sizes: list[int]
    dim_order: list[int]
    data_buffer_idx: int = 0
    allocation_info: AllocationDetails | None = None
    shape_dynamism: int = STATIC
    extra_tensor_info: ExtraTensorInfo | None = None
    requires_grad: bool = False


@dataclass
class EValue:
    """``tag`` is the KernelTypes tag; ``val`` depends on it (Tensor, int, float, bool, str,
    list of value indices / floats / bools, or None for Null)."""

    tag: int
    val: object = None


@dataclass
class Operator:
    name: str
    overload: str


@dataclass
class Instruction:
    tag: int
    # KernelCall: (op_index, args); MoveCall: (from, to); JumpFalseCall: (cond, dest); Free: (v,)
    fields: tuple


# DataLocation of BackendDelegateDataReference.
DATA_INLINE, DATA_SEGMENT = 0, 1


@dataclass
class BackendDelegate:
    """``processed`` is the backend's blob; serialization stores it in its own segment and sets
    ``location`` / ``index``."""

    id: str
    processed: bytes
    compile_specs: list[tuple[str, bytes]] = field(default_factory=list)
    location: int = DATA_INLINE
    index: int = 0


@dataclass
class ExecutionPlan:
    name: str
    encoded_inp_str: str
    encoded_out_str: str
    values: list[EValue]
    inputs: list[int]
    outputs: list[int]
    instructions: list[Instruction]
    operators: list[Operator]
    non_const_buffer_sizes: list[int]
    delegates: list[BackendDelegate] = field(default_factory=list)  # backends (DelegateCall)


@dataclass
class SubsegmentOffsets:
    segment_index: int
    offsets: list[int]


@dataclass
class DataSegment:
    offset: int
    size: int


@dataclass
class Program:
    execution_plan: list[ExecutionPlan]
    segments: list[DataSegment] = field(default_factory=list)
    constant_segment: SubsegmentOffsets | None = None
    mutable_data_segments: list[SubsegmentOffsets] | None = None
    version: int = 0
