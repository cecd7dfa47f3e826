from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class DataType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DT_UNDEFINED: _ClassVar[DataType]
    DT_FLOAT: _ClassVar[DataType]
    DT_FLOAT16: _ClassVar[DataType]
    DT_INT8: _ClassVar[DataType]
    DT_UINT8: _ClassVar[DataType]
    DT_INT16: _ClassVar[DataType]
    DT_UINT16: _ClassVar[DataType]
    DT_INT32: _ClassVar[DataType]
    DT_INT64: _ClassVar[DataType]
    DT_UINT32: _ClassVar[DataType]
    DT_UINT64: _ClassVar[DataType]
    DT_BOOL: _ClassVar[DataType]
    DT_DOUBLE: _ClassVar[DataType]
    DT_STRING: _ClassVar[DataType]
    DT_DUAL_SUB_INT8: _ClassVar[DataType]
    DT_DUAL_SUB_UINT8: _ClassVar[DataType]
    DT_COMPLEX64: _ClassVar[DataType]
    DT_COMPLEX128: _ClassVar[DataType]
    DT_QINT8: _ClassVar[DataType]
    DT_QINT16: _ClassVar[DataType]
    DT_QINT32: _ClassVar[DataType]
    DT_QUINT8: _ClassVar[DataType]
    DT_QUINT16: _ClassVar[DataType]
    DT_RESOURCE: _ClassVar[DataType]
    DT_STRING_REF: _ClassVar[DataType]
    DT_DUAL: _ClassVar[DataType]
    DT_VARIANT: _ClassVar[DataType]
    DT_BF16: _ClassVar[DataType]
    DT_INT4: _ClassVar[DataType]
    DT_UINT1: _ClassVar[DataType]
    DT_INT2: _ClassVar[DataType]
    DT_UINT2: _ClassVar[DataType]
    DT_COMPLEX32: _ClassVar[DataType]
    DT_HIFLOAT8: _ClassVar[DataType]
    DT_FLOAT8_E5M2: _ClassVar[DataType]
    DT_FLOAT8_E4M3FN: _ClassVar[DataType]
    DT_FLOAT8_E8M0: _ClassVar[DataType]
    DT_FLOAT6_E3M2: _ClassVar[DataType]
    DT_FLOAT6_E2M3: _ClassVar[DataType]
    DT_FLOAT4_E2M1: _ClassVar[DataType]
    DT_FLOAT4_E1M2: _ClassVar[DataType]
DT_UNDEFINED: DataType
DT_FLOAT: DataType
DT_FLOAT16: DataType
DT_INT8: DataType
DT_UINT8: DataType
DT_INT16: DataType
DT_UINT16: DataType
DT_INT32: DataType
DT_INT64: DataType
DT_UINT32: DataType
DT_UINT64: DataType
DT_BOOL: DataType
DT_DOUBLE: DataType
DT_STRING: DataType
DT_DUAL_SUB_INT8: DataType
DT_DUAL_SUB_UINT8: DataType
DT_COMPLEX64: DataType
DT_COMPLEX128: DataType
DT_QINT8: DataType
DT_QINT16: DataType
DT_QINT32: DataType
DT_QUINT8: DataType
DT_QUINT16: DataType
DT_RESOURCE: DataType
DT_STRING_REF: DataType
DT_DUAL: DataType
DT_VARIANT: DataType
DT_BF16: DataType
DT_INT4: DataType
DT_UINT1: DataType
DT_INT2: DataType
DT_UINT2: DataType
DT_COMPLEX32: DataType
DT_HIFLOAT8: DataType
DT_FLOAT8_E5M2: DataType
DT_FLOAT8_E4M3FN: DataType
DT_FLOAT8_E8M0: DataType
DT_FLOAT6_E3M2: DataType
DT_FLOAT6_E2M3: DataType
DT_FLOAT4_E2M1: DataType
DT_FLOAT4_E1M2: DataType

class AttrDef(_message.Message):
    __slots__ = ("list", "s", "i", "f", "b", "bt", "func", "td", "t", "g", "list_list_int", "dt", "list_list_float", "expression")
    class ListValue(_message.Message):
        __slots__ = ("s", "i", "f", "b", "bt", "td", "t", "g", "na", "dt", "val_type")
        class ListValueType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
            __slots__ = ()
            VT_LIST_NONE: _ClassVar[AttrDef.ListValue.ListValueType]
            VT_LIST_STRING: _ClassVar[AttrDef.ListValue.ListValueType]
            VT_LIST_INT: _ClassVar[AttrDef.ListValue.ListValueType]
            VT_LIST_FLOAT: _ClassVar[AttrDef.ListValue.ListValueType]
            VT_LIST_BOOL: _ClassVar[AttrDef.ListValue.ListValueType]
            VT_LIST_BYTES: _ClassVar[AttrDef.ListValue.ListValueType]
            VT_LIST_TENSOR_DESC: _ClassVar[AttrDef.ListValue.ListValueType]
            VT_LIST_TENSOR: _ClassVar[AttrDef.ListValue.ListValueType]
            VT_LIST_GRAPH: _ClassVar[AttrDef.ListValue.ListValueType]
            VT_LIST_NAMED_ATTRS: _ClassVar[AttrDef.ListValue.ListValueType]
            VT_LIST_DATA_TYPE: _ClassVar[AttrDef.ListValue.ListValueType]
        VT_LIST_NONE: AttrDef.ListValue.ListValueType
        VT_LIST_STRING: AttrDef.ListValue.ListValueType
        VT_LIST_INT: AttrDef.ListValue.ListValueType
        VT_LIST_FLOAT: AttrDef.ListValue.ListValueType
        VT_LIST_BOOL: AttrDef.ListValue.ListValueType
        VT_LIST_BYTES: AttrDef.ListValue.ListValueType
        VT_LIST_TENSOR_DESC: AttrDef.ListValue.ListValueType
        VT_LIST_TENSOR: AttrDef.ListValue.ListValueType
        VT_LIST_GRAPH: AttrDef.ListValue.ListValueType
        VT_LIST_NAMED_ATTRS: AttrDef.ListValue.ListValueType
        VT_LIST_DATA_TYPE: AttrDef.ListValue.ListValueType
        S_FIELD_NUMBER: _ClassVar[int]
        I_FIELD_NUMBER: _ClassVar[int]
        F_FIELD_NUMBER: _ClassVar[int]
        B_FIELD_NUMBER: _ClassVar[int]
        BT_FIELD_NUMBER: _ClassVar[int]
        TD_FIELD_NUMBER: _ClassVar[int]
        T_FIELD_NUMBER: _ClassVar[int]
        G_FIELD_NUMBER: _ClassVar[int]
        NA_FIELD_NUMBER: _ClassVar[int]
        DT_FIELD_NUMBER: _ClassVar[int]
        VAL_TYPE_FIELD_NUMBER: _ClassVar[int]
        s: _containers.RepeatedScalarFieldContainer[bytes]
        i: _containers.RepeatedScalarFieldContainer[int]
        f: _containers.RepeatedScalarFieldContainer[float]
        b: _containers.RepeatedScalarFieldContainer[bool]
        bt: _containers.RepeatedScalarFieldContainer[bytes]
        td: _containers.RepeatedCompositeFieldContainer[TensorDescriptor]
        t: _containers.RepeatedCompositeFieldContainer[TensorDef]
        g: _containers.RepeatedCompositeFieldContainer[GraphDef]
        na: _containers.RepeatedCompositeFieldContainer[NamedAttrs]
        dt: _containers.RepeatedScalarFieldContainer[int]
        val_type: AttrDef.ListValue.ListValueType
        def __init__(self, s: _Optional[_Iterable[bytes]] = ..., i: _Optional[_Iterable[int]] = ..., f: _Optional[_Iterable[float]] = ..., b: _Optional[_Iterable[bool]] = ..., bt: _Optional[_Iterable[bytes]] = ..., td: _Optional[_Iterable[_Union[TensorDescriptor, _Mapping]]] = ..., t: _Optional[_Iterable[_Union[TensorDef, _Mapping]]] = ..., g: _Optional[_Iterable[_Union[GraphDef, _Mapping]]] = ..., na: _Optional[_Iterable[_Union[NamedAttrs, _Mapping]]] = ..., dt: _Optional[_Iterable[int]] = ..., val_type: _Optional[_Union[AttrDef.ListValue.ListValueType, str]] = ...) -> None: ...
    class ListListInt(_message.Message):
        __slots__ = ("list_list_i",)
        class ListInt(_message.Message):
            __slots__ = ("list_i",)
            LIST_I_FIELD_NUMBER: _ClassVar[int]
            list_i: _containers.RepeatedScalarFieldContainer[int]
            def __init__(self, list_i: _Optional[_Iterable[int]] = ...) -> None: ...
        LIST_LIST_I_FIELD_NUMBER: _ClassVar[int]
        list_list_i: _containers.RepeatedCompositeFieldContainer[AttrDef.ListListInt.ListInt]
        def __init__(self, list_list_i: _Optional[_Iterable[_Union[AttrDef.ListListInt.ListInt, _Mapping]]] = ...) -> None: ...
    class ListListFloat(_message.Message):
        __slots__ = ("list_list_f",)
        class ListFloat(_message.Message):
            __slots__ = ("list_f",)
            LIST_F_FIELD_NUMBER: _ClassVar[int]
            list_f: _containers.RepeatedScalarFieldContainer[float]
            def __init__(self, list_f: _Optional[_Iterable[float]] = ...) -> None: ...
        LIST_LIST_F_FIELD_NUMBER: _ClassVar[int]
        list_list_f: _containers.RepeatedCompositeFieldContainer[AttrDef.ListListFloat.ListFloat]
        def __init__(self, list_list_f: _Optional[_Iterable[_Union[AttrDef.ListListFloat.ListFloat, _Mapping]]] = ...) -> None: ...
    LIST_FIELD_NUMBER: _ClassVar[int]
    S_FIELD_NUMBER: _ClassVar[int]
    I_FIELD_NUMBER: _ClassVar[int]
    F_FIELD_NUMBER: _ClassVar[int]
    B_FIELD_NUMBER: _ClassVar[int]
    BT_FIELD_NUMBER: _ClassVar[int]
    FUNC_FIELD_NUMBER: _ClassVar[int]
    TD_FIELD_NUMBER: _ClassVar[int]
    T_FIELD_NUMBER: _ClassVar[int]
    G_FIELD_NUMBER: _ClassVar[int]
    LIST_LIST_INT_FIELD_NUMBER: _ClassVar[int]
    DT_FIELD_NUMBER: _ClassVar[int]
    LIST_LIST_FLOAT_FIELD_NUMBER: _ClassVar[int]
    EXPRESSION_FIELD_NUMBER: _ClassVar[int]
    list: AttrDef.ListValue
    s: bytes
    i: int
    f: float
    b: bool
    bt: bytes
    func: NamedAttrs
    td: TensorDescriptor
    t: TensorDef
    g: GraphDef
    list_list_int: AttrDef.ListListInt
    dt: int
    list_list_float: AttrDef.ListListFloat
    expression: bytes
    def __init__(self, list: _Optional[_Union[AttrDef.ListValue, _Mapping]] = ..., s: _Optional[bytes] = ..., i: _Optional[int] = ..., f: _Optional[float] = ..., b: bool = ..., bt: _Optional[bytes] = ..., func: _Optional[_Union[NamedAttrs, _Mapping]] = ..., td: _Optional[_Union[TensorDescriptor, _Mapping]] = ..., t: _Optional[_Union[TensorDef, _Mapping]] = ..., g: _Optional[_Union[GraphDef, _Mapping]] = ..., list_list_int: _Optional[_Union[AttrDef.ListListInt, _Mapping]] = ..., dt: _Optional[int] = ..., list_list_float: _Optional[_Union[AttrDef.ListListFloat, _Mapping]] = ..., expression: _Optional[bytes] = ...) -> None: ...

class NamedAttrs(_message.Message):
    __slots__ = ("name", "attr")
    class AttrEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: AttrDef
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[AttrDef, _Mapping]] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    ATTR_FIELD_NUMBER: _ClassVar[int]
    name: str
    attr: _containers.MessageMap[str, AttrDef]
    def __init__(self, name: _Optional[str] = ..., attr: _Optional[_Mapping[str, AttrDef]] = ...) -> None: ...

class ShapeDef(_message.Message):
    __slots__ = ("dim",)
    DIM_FIELD_NUMBER: _ClassVar[int]
    dim: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, dim: _Optional[_Iterable[int]] = ...) -> None: ...

class TensorDescriptor(_message.Message):
    __slots__ = ("name", "dtype", "shape", "layout", "attr", "has_out_attr", "size", "weight_size", "reuse_input", "output_tensor", "device_type", "input_tensor", "real_dim_cnt", "reuse_input_index", "data_offset", "cmps_size", "cmps_tab", "cmps_tab_offset")
    class AttrEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: AttrDef
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[AttrDef, _Mapping]] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    LAYOUT_FIELD_NUMBER: _ClassVar[int]
    ATTR_FIELD_NUMBER: _ClassVar[int]
    HAS_OUT_ATTR_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_SIZE_FIELD_NUMBER: _ClassVar[int]
    REUSE_INPUT_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TENSOR_FIELD_NUMBER: _ClassVar[int]
    DEVICE_TYPE_FIELD_NUMBER: _ClassVar[int]
    INPUT_TENSOR_FIELD_NUMBER: _ClassVar[int]
    REAL_DIM_CNT_FIELD_NUMBER: _ClassVar[int]
    REUSE_INPUT_INDEX_FIELD_NUMBER: _ClassVar[int]
    DATA_OFFSET_FIELD_NUMBER: _ClassVar[int]
    CMPS_SIZE_FIELD_NUMBER: _ClassVar[int]
    CMPS_TAB_FIELD_NUMBER: _ClassVar[int]
    CMPS_TAB_OFFSET_FIELD_NUMBER: _ClassVar[int]
    name: str
    dtype: DataType
    shape: ShapeDef
    layout: str
    attr: _containers.MessageMap[str, AttrDef]
    has_out_attr: bool
    size: int
    weight_size: int
    reuse_input: bool
    output_tensor: bool
    device_type: str
    input_tensor: bool
    real_dim_cnt: int
    reuse_input_index: int
    data_offset: int
    cmps_size: int
    cmps_tab: str
    cmps_tab_offset: int
    def __init__(self, name: _Optional[str] = ..., dtype: _Optional[_Union[DataType, str]] = ..., shape: _Optional[_Union[ShapeDef, _Mapping]] = ..., layout: _Optional[str] = ..., attr: _Optional[_Mapping[str, AttrDef]] = ..., has_out_attr: bool = ..., size: _Optional[int] = ..., weight_size: _Optional[int] = ..., reuse_input: bool = ..., output_tensor: bool = ..., device_type: _Optional[str] = ..., input_tensor: bool = ..., real_dim_cnt: _Optional[int] = ..., reuse_input_index: _Optional[int] = ..., data_offset: _Optional[int] = ..., cmps_size: _Optional[int] = ..., cmps_tab: _Optional[str] = ..., cmps_tab_offset: _Optional[int] = ...) -> None: ...

class TensorDef(_message.Message):
    __slots__ = ("desc", "data")
    DESC_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    desc: TensorDescriptor
    data: bytes
    def __init__(self, desc: _Optional[_Union[TensorDescriptor, _Mapping]] = ..., data: _Optional[bytes] = ...) -> None: ...

class OpDef(_message.Message):
    __slots__ = ("name", "type", "input", "attr", "has_out_attr", "id", "stream_id", "input_name", "src_name", "src_index", "dst_name", "dst_index", "input_i", "output_i", "workspace", "workspace_bytes", "is_input_const", "input_desc", "output_desc", "subgraph_name")
    class AttrEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: AttrDef
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[AttrDef, _Mapping]] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    ATTR_FIELD_NUMBER: _ClassVar[int]
    HAS_OUT_ATTR_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    STREAM_ID_FIELD_NUMBER: _ClassVar[int]
    INPUT_NAME_FIELD_NUMBER: _ClassVar[int]
    SRC_NAME_FIELD_NUMBER: _ClassVar[int]
    SRC_INDEX_FIELD_NUMBER: _ClassVar[int]
    DST_NAME_FIELD_NUMBER: _ClassVar[int]
    DST_INDEX_FIELD_NUMBER: _ClassVar[int]
    INPUT_I_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_I_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_BYTES_FIELD_NUMBER: _ClassVar[int]
    IS_INPUT_CONST_FIELD_NUMBER: _ClassVar[int]
    INPUT_DESC_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_DESC_FIELD_NUMBER: _ClassVar[int]
    SUBGRAPH_NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    type: str
    input: _containers.RepeatedScalarFieldContainer[str]
    attr: _containers.MessageMap[str, AttrDef]
    has_out_attr: bool
    id: int
    stream_id: int
    input_name: _containers.RepeatedScalarFieldContainer[str]
    src_name: _containers.RepeatedScalarFieldContainer[str]
    src_index: _containers.RepeatedScalarFieldContainer[int]
    dst_name: _containers.RepeatedScalarFieldContainer[str]
    dst_index: _containers.RepeatedScalarFieldContainer[int]
    input_i: _containers.RepeatedScalarFieldContainer[int]
    output_i: _containers.RepeatedScalarFieldContainer[int]
    workspace: _containers.RepeatedScalarFieldContainer[int]
    workspace_bytes: _containers.RepeatedScalarFieldContainer[int]
    is_input_const: _containers.RepeatedScalarFieldContainer[bool]
    input_desc: _containers.RepeatedCompositeFieldContainer[TensorDescriptor]
    output_desc: _containers.RepeatedCompositeFieldContainer[TensorDescriptor]
    subgraph_name: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., type: _Optional[str] = ..., input: _Optional[_Iterable[str]] = ..., attr: _Optional[_Mapping[str, AttrDef]] = ..., has_out_attr: bool = ..., id: _Optional[int] = ..., stream_id: _Optional[int] = ..., input_name: _Optional[_Iterable[str]] = ..., src_name: _Optional[_Iterable[str]] = ..., src_index: _Optional[_Iterable[int]] = ..., dst_name: _Optional[_Iterable[str]] = ..., dst_index: _Optional[_Iterable[int]] = ..., input_i: _Optional[_Iterable[int]] = ..., output_i: _Optional[_Iterable[int]] = ..., workspace: _Optional[_Iterable[int]] = ..., workspace_bytes: _Optional[_Iterable[int]] = ..., is_input_const: _Optional[_Iterable[bool]] = ..., input_desc: _Optional[_Iterable[_Union[TensorDescriptor, _Mapping]]] = ..., output_desc: _Optional[_Iterable[_Union[TensorDescriptor, _Mapping]]] = ..., subgraph_name: _Optional[_Iterable[str]] = ...) -> None: ...

class GraphDef(_message.Message):
    __slots__ = ("name", "input", "output", "op", "attr")
    class AttrEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: AttrDef
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[AttrDef, _Mapping]] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    OP_FIELD_NUMBER: _ClassVar[int]
    ATTR_FIELD_NUMBER: _ClassVar[int]
    name: str
    input: _containers.RepeatedScalarFieldContainer[str]
    output: _containers.RepeatedScalarFieldContainer[str]
    op: _containers.RepeatedCompositeFieldContainer[OpDef]
    attr: _containers.MessageMap[str, AttrDef]
    def __init__(self, name: _Optional[str] = ..., input: _Optional[_Iterable[str]] = ..., output: _Optional[_Iterable[str]] = ..., op: _Optional[_Iterable[_Union[OpDef, _Mapping]]] = ..., attr: _Optional[_Mapping[str, AttrDef]] = ...) -> None: ...

class ModelDef(_message.Message):
    __slots__ = ("name", "version", "custom_version", "graph", "attr")
    class AttrEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: AttrDef
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[AttrDef, _Mapping]] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CUSTOM_VERSION_FIELD_NUMBER: _ClassVar[int]
    GRAPH_FIELD_NUMBER: _ClassVar[int]
    ATTR_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: int
    custom_version: str
    graph: _containers.RepeatedCompositeFieldContainer[GraphDef]
    attr: _containers.MessageMap[str, AttrDef]
    def __init__(self, name: _Optional[str] = ..., version: _Optional[int] = ..., custom_version: _Optional[str] = ..., graph: _Optional[_Iterable[_Union[GraphDef, _Mapping]]] = ..., attr: _Optional[_Mapping[str, AttrDef]] = ...) -> None: ...
