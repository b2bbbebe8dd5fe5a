"""Every TF Adapter session option (``custom_op.parameter_map[NAME]``) as an OptionSpec, grouped by the
section of the CANN session-option reference it is documented in. Facts come from shared/seeds (001 first,
cross-checked with 000, 004 section 7.1 and 002); all wording is ours. A data table: it may exceed the
usual 400-line module size.
"""

from npulaunch.config.catalog import OptionSpec

_A2_A3 = "Atlas A2 training/inference series, Atlas A3 training/inference series"
_AOE_PRODUCTS = "Atlas A3 training/inference series, Atlas A2 training/inference series, Atlas training series"

OPTIONS = (
    # -- basic ---------------------------------------------------------------------------------------
    OptionSpec(
        name="graph_run_mode",
        type="i",
        area="basic",
        scenario="both",
        description="Tells the adapter whether the graph is run for training (1) or for online inference (0).",
        default=1,
        default_note="1 (training) when unset; online inference has to set 0 (004 section 3).",
        choices=(0, 1),
        notes="0 = online inference, 1 = training. enable_small_channel's default follows it, and options "
        "documented for one scenario only belong with the matching value.",
        example=1,
    ),
    OptionSpec(
        name="session_device_id",
        type="i",
        area="basic",
        scenario="both",
        description="Logical device a session runs on, so one script can put different graphs on different NPUs.",
        min=0,
        notes="Logical NPU ID, the same ID space as ASCEND_DEVICE_ID ([0, N-1], N = devices visible in the "
        "machine, VM or container; 004 section 7.4.12). When both are given, session_device_id wins over "
        "ASCEND_DEVICE_ID. Usual pattern: one session per graph, each with its own ID.",
        example=0,
    ),
    OptionSpec(
        name="deterministic",
        type="i",
        area="basic",
        scenario="both",
        description="Makes operators give bit-identical results on repeated runs with the same hardware and input.",
        default=0,
        choices=(0, 1),
        notes="0 = off, 1 = on. Costs operator speed. Fully repeatable runs also need fixed random seeds in the "
        "training script.",
        example=1,
    ),
    # -- memory --------------------------------------------------------------------------------------
    OptionSpec(
        name="atomic_clean_policy",
        type="i",
        area="memory",
        scenario="both",
        description="Clear the memory of memset (atomic) operators in one go (0) or operator by operator (1).",
        default=0,
        choices=(0, 1),
        notes="1 can help when memset operators use too much memory, at some cost in speed. 004 calls them "
        "atomic operators.",
        example=1,
    ),
    OptionSpec(
        name="static_memory_policy",
        type="i",
        area="memory",
        scenario="both",
        description="How memory is allocated while the network runs: plain dynamic, or expandable pools.",
        default=0,
        choices=(0, 1, 2, 3, 4),
        notes="0 = allocate by actual size; 2 = expandable memory for static shapes, shared by the graphs of a "
        "session and sized by the largest (a bigger graph frees the previous one's memory and reallocates); "
        "3 = expandable memory for dynamic shapes (less fragmentation and memory); 4 = expandable for both "
        "static and dynamic shapes. 1 is kept for compatibility and behaves as 2. 2 and 4 are not allowed "
        "when several graphs execute concurrently. 3 and 4 save memory but may slow the run. Do not also set "
        "the environment variable GE_USE_STATIC_MEMORY: the two conflict at run time, and the variable is "
        "to be dropped in favour of this option (004 section 7.4.1). The 004 edition lists only 0 and 2 "
        "(plus 1).",
        example=0,
    ),
    OptionSpec(
        name="variable_use_1g_huge_page",
        type="i",
        area="memory",
        scenario="both",
        description="Put variables and constants on 1 GB huge pages to speed up scattered access to big embeddings.",
        default=0,
        choices=(0, 1, 2),
        products=_A2_A3,
        notes="0 = system page size (4 KB or 2 MB); 1 = 1 GB pages, a failed allocation logs an error and stops "
        "the service; 2 = 1 GB pages, falling back to 2 MB pages when that fails (the service stops only if "
        "the fallback fails too).",
        example=2,
    ),
    OptionSpec(
        name="external_weight",
        type="b",
        area="memory",
        scenario="both",
        description="Move Const/Constant weights out of the graph into files so models in one session share them.",
        default=False,
        notes="True writes every Const/Constant weight to disk as a FileConstant (files weight_<hash>) in "
        "tmp_weight_<pid>_<sessionid> under $ASCEND_WORK_PATH, or under the current directory when that "
        "variable is unset; the directory is removed when the model is unloaded. Meant for memory-limited "
        "model loading. compile_hybrid_mode=1 switches this behaviour on by itself when external_weight is "
        "not enabled.",
        example=True,
    ),
    OptionSpec(
        name="input_fusion_size",
        type="i",
        area="memory",
        scenario="both",
        description="Inputs no larger than this are merged into one host-to-device copy; larger ones go alone.",
        default=131072,
        min=0,
        max=33554432,
        notes="The unit is bytes (maximum 32 MB, default 128 KB). 0 turns fusion off. Static-shape graphs only. Inputs "
        "taken by fusion no longer count for input_batch_cpy's batch copy.",
        example=25600,
    ),
    OptionSpec(
        name="input_batch_cpy",
        type="b",
        area="memory",
        scenario="both",
        description="Copy several user inputs from host to device as one batch to make better use of PCIe.",
        default=False,
        products=_A2_A3,
        notes="Only acts when the network has more than one input. With input_fusion_size also in play, inputs "
        "under the fusion threshold are fused first and the rest may be too few for a batch copy.",
        example=True,
    ),
    # -- dynamic_shape -------------------------------------------------------------------------------
    OptionSpec(
        name="input_shape",
        type="s",
        area="dynamic_shape",
        scenario="inference",
        description="Input names and shapes for dynamic-dimension profiles; -1 marks each dimension that varies.",
        form="input_shape",
        notes="Text form name:d,d,...;name:d,... (':' after the name, ';' between inputs, ',' between dims). "
        "Each -1 takes its sizes from dynamic_dims; input_shape, dynamic_dims and dynamic_node_type go "
        "together. Inputs are listed in the alphabetical order of the real data node names (data, label, "
        "mask). When the network has dataset and placeholder inputs, give only the shapes of the kind that "
        "is dynamic. A scalar input has shape 0. Fixed inputs among dynamic ones are still listed with their "
        "fixed shape (004 section 5.6). The shapes must be valid. Whole-graph profiles cannot be combined "
        "with mixed computing; a dataset get_next must not be named, and a graph may hold only one get_next "
        "(004 section 5.6).",
        example={"data": [1, 1, 40, -1], "label": [1, -1], "mask": [-1, -1]},
    ),
    OptionSpec(
        name="dynamic_dims",
        type="s",
        area="dynamic_shape",
        scenario="inference",
        description="The allowed size combinations (profiles) for the -1 dimensions declared in input_shape.",
        form="dynamic_dims",
        notes="Text form d,d,...;d,d,... (';' between profiles, ',' between sizes). Every profile has exactly "
        "one size per -1 of input_shape, in order. At least 2 profiles; at most 100 on Atlas A3, Atlas A2, "
        "Atlas inference and Atlas training products (range (1, 100]). A mismatch with input_shape is an "
        "error that ends the program. Goes with input_shape and dynamic_node_type. When "
        "dynamic_inputs_shape_range is also set, dynamic_dims wins and the range is ignored.",
        example=[[20, 20, 1, 1], [40, 40, 2, 2], [80, 60, 4, 4]],
    ),
    OptionSpec(
        name="dynamic_node_type",
        type="i",
        area="dynamic_shape",
        scenario="inference",
        description="Which kind of input is dynamic in the profile setup: dataset (0) or placeholder (1).",
        choices=(0, 1),
        notes="Only one kind may be dynamic, never dataset and placeholder inputs at once. Goes with input_shape "
        "and dynamic_dims. compile_hybrid_mode supports only 1.",
        example=0,
    ),
    OptionSpec(
        name="compile_hybrid_mode",
        type="i",
        area="dynamic_shape",
        scenario="inference",
        description="Build both a profile graph and a dynamic-shape graph, and pick per run by the input shape.",
        default=0,
        choices=(0, 1),
        notes="1 = on: shapes inside the profiles run the profile graph, other shapes the dynamic-shape graph. "
        "Needs input_shape, dynamic_dims and dynamic_node_type, and only dynamic_node_type=1 (placeholder "
        "inputs) is supported. Turns weight externalisation on (as external_weight=True) when "
        "external_weight is not enabled, so the graphs share weight files.",
        example=1,
    ),
    OptionSpec(
        name="ac_parallel_enable",
        type="s",
        area="dynamic_shape",
        scenario="both",
        description="Let AI CPU operators run alongside AI Core operators on separate streams in dynamic-shape graphs.",
        default="0",
        choices=("0", "1"),
        notes="Text '1' = on (the system finds AI CPU operators that can overlap AI Core work and gives each "
        "engine its own stream), '0' = off. Dynamic-shape graphs.",
        example="1",
    ),
    OptionSpec(
        name="compile_dynamic_mode",
        type="b",
        area="dynamic_shape",
        scenario="both",
        description="Generalise every input shape to -1, compiling even static-shape graphs as dynamic ones.",
        default=False,
        notes="Cannot be combined with the profile options input_shape, dynamic_dims and dynamic_node_type. When "
        "True the first iteration already generalises all input shapes, so shape_generalization_mode does "
        "nothing.",
        example=True,
    ),
    OptionSpec(
        name="all_tensor_not_empty",
        type="b",
        area="dynamic_shape",
        scenario="both",
        description="Drop the empty-tensor guard nodes from dynamic-shape execution graphs to run faster.",
        default=False,
        notes="Set True only when the graph surely has no empty tensors; otherwise some operators may fail.",
        example=True,
    ),
    # -- mixed_computing -----------------------------------------------------------------------------
    OptionSpec(
        name="mix_compile_mode",
        type="b",
        area="mixed_computing",
        scenario="both",
        description="Mixed computing: operators the NPU cannot take stay in TensorFlow, the rest are offloaded.",
        default=False,
        notes="Off means full offload of every compute operator to the device. Needed by variable_placement=Host "
        "and by in_out_pair. Cannot be combined with whole-graph dynamic-dimension profiles (input_shape, "
        "dynamic_dims, dynamic_node_type; 004 section 5.6).",
        example=True,
    ),
    OptionSpec(
        name="in_out_pair_flag",
        type="b",
        area="mixed_computing",
        scenario="inference",
        description="Whether the operator range named by in_out_pair goes to the NPU (True) or stays on the host.",
        default=True,
        notes="Only meaningful in mixed computing (mix_compile_mode=True) with in_out_pair set. False keeps the "
        "range in the framework and offloads everything else.",
        example=False,
    ),
    OptionSpec(
        name="in_out_pair",
        type="s",
        area="mixed_computing",
        scenario="inference",
        description="First and last operators of the one range that mixed computing offloads or keeps on the host.",
        form="mapping_text",
        notes="Value is Python's str() of a list with a single [in_nodes, out_nodes] pair, each a list of node "
        "names; only one range is supported. in_out_pair_flag chooses the direction (True: the range runs "
        "on the NPU and the rest in the framework; False: the reverse). Needs mix_compile_mode=True.",
        example="[[['import/conv2d_1/convolution'], ['import/conv2d_59/BiasAdd', 'import/conv2d_67/BiasAdd', "
        "'import/conv2d_75/BiasAdd']]]",
    ),
    # -- debug ---------------------------------------------------------------------------------------
    OptionSpec(
        name="enable_exception_dump",
        type="i",
        area="debug",
        scenario="both",
        description="Dump the data of operators that fail (inputs, outputs, workspace) for AI Core error analysis.",
        default=2,
        default_note="2 in 001; the 004 and 002 editions know only 0 and 1, with 0 as default.",
        choices=(0, 1, 2),
        notes="0 = off. 1 = full exception dump (inputs, outputs, tensor descriptions, workspace), written under "
        "NPU_COLLECT_PATH, else ASCEND_WORK_PATH, else ./extra-info. 2 = lite exception dump (inputs, "
        "outputs, workspace, tiling), written under ASCEND_WORK_PATH, else ./extra-info/data-dump/"
        "<device_id>. With NPU_COLLECT_PATH set, mode 1 is used whatever the value, into that path. With "
        "enable_dump or enable_dump_debug True and this at 1, dynamic-shape networks get only the exception "
        "dump, static-shape networks get both. 004 lists it for training only.",
        example=1,
    ),
    OptionSpec(
        name="op_debug_config",
        type="s",
        area="debug",
        scenario="both",
        description="Path of a .cfg file that enables operator build and debug aids such as the memory overrun check.",
        form="path",
        notes="The file has a line op_debug_config=<items, comma-separated>: oom (check global memory for "
        "overwrites while operators run; an overwrite reports EZ9999), dump_cce (keep .cce, .o and .json in "
        "kernel_meta), dump_loc (also keep the _loc.json python-cce map), ccec_O0 (CCEC -O0), ccec_g (CCEC "
        "-g), check_flag (check pipeline sync flags; a mismatch times out at the operator); 004 also lists "
        "dump_bin (keep .o and .json). An optional line op_debug_list=<operator names or OpType::Type, "
        "comma-separated> limits the build options to those operators. oom and ccec_O0 must not be combined "
        "(AI Core error), nor oom with op_debug_level=2; oom is not allowed while NPU_COLLECT_PATH is set. "
        "ccec_O0/ccec_g enlarge kernels and can break dynamic-shape builds. Debug files go to debug_dir when "
        "set. MC2 operators (MatMulAllReduce and the like) get no .o/.json/.cce with oom, dump_cce or "
        "dump_loc. When set without op_debug_list the operator compile cache is ignored and everything is "
        "recompiled; with op_debug_list and op_compiler_cache_mode enable/force only listed operators are "
        "recompiled.",
        example="/root/test0.cfg",
    ),
    OptionSpec(
        name="debug_dir",
        type="s",
        area="debug",
        scenario="both",
        description="Directory for the debug files (.o, .json, .cce) that operator compilation produces.",
        form="path",
        writes=True,
        notes="Priority: debug_dir > ASCEND_WORK_PATH > the script's working directory. Used with op_debug_config "
        "(dump_cce, dump_loc; 004: also dump_bin) and with a non-zero op_debug_level.",
        example="/home/test",
    ),
    OptionSpec(
        name="export_compile_stat",
        type="i",
        area="debug",
        scenario="both",
        description="When to write fusion_result.json, the record of which fusion patterns compilation applied.",
        default=1,
        choices=(0, 1, 2),
        notes="0 = never; 1 = when the program exits normally; 2 = as soon as graph compilation ends (kept even if "
        "the program is then interrupted). Written to ./fusion_result.json, or to "
        "$ASCEND_WORK_PATH/FE/<pid>/fusion_result.json when ASCEND_WORK_PATH is set. Patterns switched off "
        "through fusion_switch_file are not listed.",
        example=1,
    ),
    # -- accuracy ------------------------------------------------------------------------------------
    OptionSpec(
        name="precision_mode_v2",
        type="s",
        area="accuracy",
        scenario="both",
        description="Network-wide operator precision mode; the newer, recommended form of precision_mode.",
        default_note="Training: origin on Atlas A2/A3; on Atlas training products it has no default and "
        "precision_mode's allow_fp32_to_fp16 applies. Online inference: fp16.",
        choices=("fp16", "origin", "cube_fp16in_fp32out", "mixed_float16", "mixed_bfloat16"),
        notes="fp16 = force float16 wherever float16/bfloat16/float32 is possible; origin = keep the graph's "
        "precision (falls back to float32 or to AI CPU operators when the AI Core kernel lacks the type); "
        "cube_fp16in_fp32out = cube operators prefer float16 in / float32 out, vector operators are forced "
        "to float32; mixed_float16 = automatic mixed precision with float16 (pair with loss scaling); "
        "mixed_bfloat16 = automatic mixed precision with bfloat16, Atlas A2/A3 only. bfloat16 is not "
        "supported on Atlas training or Atlas inference products. Never set together with precision_mode. "
        "modify_mixlist applies in the mixed modes; customize_dtypes does nothing with origin; "
        "experimental_accelerate_train_mode needs this unset or origin.",
        example="origin",
    ),
    OptionSpec(
        name="precision_mode",
        type="s",
        area="accuracy",
        scenario="both",
        description="Network-wide operator precision mode (older form; precision_mode_v2 is recommended).",
        default_note="Training: must_keep_origin_dtype on Atlas A2/A3, allow_fp32_to_fp16 on Atlas training "
        "products; online inference: force_fp16.",
        choices=(
            "allow_fp32_to_fp16",
            "force_fp16",
            "force_fp32",
            "cube_fp16in_fp32out",
            "must_keep_origin_dtype",
            "allow_mix_precision_fp16",
            "allow_mix_precision",
            "allow_mix_precision_bf16",
            "allow_fp32_to_bf16",
        ),
        notes="force_fp32 and cube_fp16in_fp32out are the same mode, as are allow_mix_precision and "
        "allow_mix_precision_fp16. force_fp16 is for online inference only. allow_mix_precision_bf16 and "
        "allow_fp32_to_bf16 are Atlas A2/A3 only; bfloat16 is unsupported on Atlas training and Atlas "
        "inference products. Never set together with precision_mode_v2. customize_dtypes and "
        "keep_tensors_dtypes do nothing with must_keep_origin_dtype. experimental_accelerate_train_mode "
        "needs this unset, allow_fp32_to_fp16 or must_keep_origin_dtype. 002 also accepts None as "
        "allow_fp32_to_fp16.",
        example="allow_mix_precision",
    ),
    OptionSpec(
        name="modify_mixlist",
        type="s",
        area="accuracy",
        scenario="both",
        description="Path of a JSON file moving operators between the mixed-precision block, trust and gray lists.",
        form="path",
        notes="Applies when mixed precision is on (precision_mode_v2 mixed_float16/mixed_bfloat16, or "
        "precision_mode allow_mix_precision/allow_mix_precision_fp16/allow_mix_precision_bf16). The file "
        "has black-list and white-list objects, each with to-remove and to-add arrays of operator types. "
        "Removing an operator from one list without adding it to the other leaves it on the gray list (004 "
        "section 5.1). Built-in lists: precision_reduce flag in aic-<soc_version>-ops-info*.json.",
        example="/home/test/ops_info.json",
    ),
    OptionSpec(
        name="customize_dtypes",
        type="s",
        area="accuracy",
        scenario="both",
        description="Path of a file fixing the input/output dtypes of chosen operators, overriding the global mode.",
        form="path",
        notes="One operator per line: OpName::InputDtype:t1,t2,...,OutputDtype:t1,... or "
        "OpType::TypeName:InputDtype:...,OutputDtype:... (Ascend IR types); an entry by name beats one by "
        "type. Has no effect when precision_mode_v2=origin or precision_mode=must_keep_origin_dtype. An "
        "unsupported dtype fails compilation; names can change through fusion, so name entries may not "
        "apply.",
        example="/home/test/customize_dtypes.cfg",
    ),
    # -- dump (accuracy comparison) ------------------------------------------------------------------
    OptionSpec(
        name="enable_dump",
        type="b",
        area="dump",
        scenario="both",
        description="Switch on the data dump of operator inputs/outputs for accuracy comparison.",
        default=False,
        notes="Needs dump_path (an unset dump_path raises an exception). Never True together with "
        "enable_dump_debug. With enable_exception_dump=1, dynamic-shape networks get only the exception "
        "dump and static-shape networks get both. Files land in "
        "{dump_path}/{time}/{device_id}/{model_name}/{model_id}/{data_index} (004 section 5.4). When "
        "initialize_system is used, set it on that session (002).",
        example=True,
    ),
    OptionSpec(
        name="dump_mode",
        type="s",
        area="dump",
        scenario="both",
        description="Whether the data dump records operator inputs, outputs, or both.",
        default="output",
        choices=("input", "output", "all"),
        notes="With all, operators that change their inputs (e.g. HcomAllGather, HcomAllReduce) have inputs dumped "
        "before and outputs after execution, so one operator gives several files. A setting of the data "
        "dump (enable_dump).",
        example="all",
    ),
    OptionSpec(
        name="enable_dump_debug",
        type="b",
        area="dump",
        scenario="training",
        description="Switch on collection of overflow/underflow data.",
        default=False,
        notes="Needs dump_path (an unset dump_path is an error). Never True together with enable_dump. With "
        "enable_exception_dump=1, see enable_dump. 002 says the initialize_system session did not support "
        "it in that version.",
        example=True,
    ),
    OptionSpec(
        name="dump_debug_mode",
        type="s",
        area="dump",
        scenario="training",
        description="Which overflow/underflow checks run: AI Core operators, Atomic Add, or both.",
        default="all",
        choices=("aicore_overflow", "atomic_overflow", "all"),
        notes="aicore_overflow flags extreme outputs from normal inputs (e.g. 65500, 38400, 51200 in float16); "
        "atomic_overflow checks Atomic Add when data moves from UB to OUT. Atlas A2 training/inference "
        "products accept only all. The mode of the collection turned on by enable_dump_debug.",
        example="all",
    ),
    OptionSpec(
        name="dump_path",
        type="s",
        area="dump",
        scenario="both",
        description="Directory the data dump and the overflow dump write their files to.",
        form="path",
        writes=True,
        notes="Required when enable_dump or enable_dump_debug is True. Must already exist where training runs "
        "(container or host) and be readable and writable by the run user; absolute, or relative to the "
        "directory the script runs from.",
        example="/home/test/output",
    ),
    OptionSpec(
        name="dump_step",
        type="s",
        area="dump",
        scenario="training",
        description="Which iterations the data dump covers; every iteration when unset.",
        form="dump_step",
        notes="Text form: iterations separated by '|', ranges written low-high with '-', e.g. 0|3-5|10. The seeds "
        "give no limit on how many. When set, the dump's data_index directory is the step number (004 "
        "section 5.4).",
        example=[0, 5, 10],
    ),
    OptionSpec(
        name="dump_data",
        type="s",
        area="dump",
        scenario="both",
        description="Dump whole tensors, or only per-operator statistics written as CSV.",
        default="tensor",
        choices=("tensor", "stats"),
        notes="stats suits large jobs: spot suspicious operators from the statistics, then dump their tensors.",
        example="stats",
    ),
    OptionSpec(
        name="dump_layer",
        type="s",
        area="dump",
        scenario="both",
        description="Names of the operators to dump; every operator when unset.",
        notes="Names separated by spaces, not commas. An operator fed by a data operator brings that data "
        "operator into the dump too.",
        example="nodename1 nodename2 nodename3",
    ),
    OptionSpec(
        name="quant_dumpable",
        type="s",
        area="dump",
        scenario="inference",
        description="For AMCT-quantised networks, keep the pre-quantisation inputs/outputs so they can be dumped.",
        default="0",
        choices=("0", "1"),
        notes="'0' = off (compilation may optimise those tensors away); '1' = collect dump data from before "
        "quantisation. Used with the data dump (enable_dump). Online inference only.",
        example="1",
    ),
    OptionSpec(
        name="fusion_switch_file",
        type="s",
        area="dump",
        scenario="both",
        description="Path of the file that switches individual graph-fusion and UB-fusion patterns on or off.",
        form="path",
        notes="Allowed characters: letters, digits, '_', '-', '.' (000/004: Chinese characters too). JSON: "
        "Switch.GraphFusion and Switch.UBFusion map pattern names to on/off; ALL: off turns every "
        "switchable pattern off, and listed patterns can then be turned back on. Some patterns cannot be "
        "switched off. Patterns turned off here do not appear in export_compile_stat's fusion_result.json.",
        example="/home/test/fusion_switch.cfg",
    ),
    OptionSpec(
        name="buffer_optimize",
        type="s",
        area="dump",
        scenario="inference",
        description="Advanced switch for buffer optimisation.",
        default="l2_optimize",
        choices=("l2_optimize", "off_optimize"),
        example="l2_optimize",
    ),
    OptionSpec(
        name="use_off_line",
        type="b",
        area="dump",
        scenario="both",
        description="Run on the Ascend AI Processor (True) or on the host CPU (False).",
        default=True,
        notes="Every sample in the seeds sets it to True explicitly.",
        example=True,
    ),
    # -- performance ---------------------------------------------------------------------------------
    OptionSpec(
        name="iterations_per_loop",
        type="i",
        area="performance",
        scenario="training",
        description="Iterations the device runs per sess.run() call, as also given to set_iteration_per_loop.",
        min=1,  # NPURunConfig: check_positive_integer (TF Adapter npu_config.py @ 82957b9)
        notes="Must equal the iterations_per_loop passed to set_iteration_per_loop (it is used to check it). Small "
        "loops can make experimental_accelerate_train_mode split training inaccurately.",
        example=10,
    ),
    OptionSpec(
        name="hcom_parallel",
        type="b",
        area="performance",
        scenario="training",
        description="Overlap AllReduce gradient updates with forward and backward computation in distributed runs.",
        default=True,
        notes="False is advised for small networks such as ResNet-18.",
        example=True,
    ),
    OptionSpec(
        name="enable_small_channel",
        type="i",
        area="performance",
        scenario="both",
        description="Optimisation for convolution layers with at most 4 channels.",
        default_note="0 in training (graph_run_mode=1); 1 in online inference (graph_run_mode=0), where 001 says "
        "it cannot be changed.",
        choices=(0, 1),
        notes="Enabling it in training is not advised. Gains reported on ResNet50/101/152 (000/004: also "
        "GoogleNet); other networks may slow down.",
        example=1,
    ),
    OptionSpec(
        name="op_precision_mode",
        type="s",
        area="performance",
        scenario="both",
        description="Path of an .ini file choosing the precision/performance implementation per operator.",
        form="path",
        notes="Sections [ByOpType] and [ByNodeName] (node names win) with lines name=mode. Modes: high_precision, "
        "high_performance, enable_float_32_execution (Atlas A2/A3 only), enable_hi_float_32_execution (not "
        "supported in this version), support_out_of_bound_index (bounds-checks gather/scatter/segment "
        "indices, slower), keep_fp16, super_performance. Each operator's modes are listed in "
        "opp/built-in/op_impl/ai_core/tbe/impl_mode/all_ops_impl_mode.ini. Not to be combined with "
        "op_select_implmode or optypelist_for_implmode: when all are set only op_precision_mode counts.",
        example="/home/test/op_precision.ini",
    ),
    OptionSpec(
        name="enable_scope_fusion_passes",
        type="s",
        area="performance",
        scenario="both",
        description="Non-general scope fusion patterns to switch on when building.",
        form="name_list",
        notes="Comma-separated names of registered patterns. General patterns are always on and cannot be "
        "switched off; non-general ones are off unless listed here.",
        example=["ScopeLayerNormPass", "ScopeClipBoxesPass"],
    ),
    OptionSpec(
        name="stream_max_parallel_num",
        type="s",
        area="performance",
        scenario="both",
        description="Parallelism of the AI CPU and AI Core engines, for NMT networks.",
        default_note="1 for each engine.",
        form="stream_parallel",
        notes="Text form Engine:N,Engine:N with engine names DNN_VM_AICPU (AI CPU) and AIcoreEngine (AI Core). A "
        "value may not exceed the number of AI Cores. NMT networks only.",
        example={"DNN_VM_AICPU": 10, "AIcoreEngine": 1},
    ),
    OptionSpec(
        name="is_tailing_optimization",
        type="b",
        area="performance",
        scenario="training",
        description="BERT communication tail optimisation: overlap work not needing the last AllReduce with it.",
        default=False,
        notes="BERT networks only, in distributed training. Works with NPUOptimizer and must equal the "
        "is_tailing_optimization given to NPUOptimizer.",
        example=True,
    ),
    OptionSpec(
        name="variable_placement",
        type="s",
        area="performance",
        scenario="both",
        description="Keep variables on the device or on the host, to relieve device memory for large weights.",
        default="Device",
        choices=("Device", "Host"),
        notes="Host needs mix_compile_mode=True. With TF v1 control flow (tf.case, tf.cond, tf.while_loop), Host "
        "may fail unless the script calls tf.enable_control_flow_v2() and tf.enable_resource_variables().",
        example="Device",
    ),
    OptionSpec(
        name="frozen_variable",
        type="b",
        area="performance",
        scenario="inference",
        description="Turn variables into constants for inference to cut host-device copies.",
        default=False,
        example=True,
    ),
    OptionSpec(
        name="graph_max_parallel_model_num",
        type="i",
        area="performance",
        scenario="inference",
        description="How many threads execute the graph in parallel during online inference.",
        default=1,
        min=1,
        max=2147483647,
        notes="Range [1, INT32_MAX = 2147483647] in 001; the 000 edition gives [1, 8]. Above 1, that many threads "
        "pipeline graph executions.",
        example=4,
    ),
    # -- profiling -----------------------------------------------------------------------------------
    OptionSpec(
        name="profiling_mode",
        type="b",
        area="profiling",
        scenario="both",
        description="Switch profiling on; what is collected comes from profiling_options.",
        default=False,
        notes="Takes priority over the PROFILING_MODE environment variable. When initialize_system is used, set "
        "it on that session (002).",
        example=True,
    ),
    OptionSpec(
        name="profiling_options",
        type="s",
        area="profiling",
        scenario="both",
        description="JSON object of profiling settings: output directory, traces, metrics and sampling rates.",
        form="json",
        writes=True,
        notes="writes refers to the output key: the directory for results, absolute or relative to the working "
        "directory, without the characters \\n \\f \\r \\b \\t \\v \\u007F; it beats ASCEND_WORK_PATH; "
        "created automatically per 001, to be created beforehand per 004. Keys: storage_limit 'NMB', 200 to "
        "4294967295 MB (004: 4294967296), default 90% of the disk's free space; training_trace on/off; "
        "task_trace and task_time on/off/l0/l1 (on = l1, the default); ge_api off/l0/l1 (default off); hccl "
        "on/off (default off; to be dropped, use task_time); aicpu on/off (default off); fp_point / bp_point "
        "= first forward / last backward operator name, '' to detect automatically (must be named by hand "
        "for dynamic shapes); aic_metrics ArithmeticUtilization, PipeUtilization (default), Memory, "
        "MemoryL0, MemoryUB, ResourceConflictRatio, L2Cache and MemoryAccess (these two not on Atlas "
        "training/inference products), or Custom:r1,r2,... with at most 8 registers in 0x1-0x6E (hex or "
        "decimal); l2 on/off; msproftx on/off; runtime_api on/off; sys_hardware_mem_freq 1-100 Hz; "
        "llc_profiling read (default)/write; sys_io_sampling_freq 1-100 Hz (not on Atlas inference); "
        "sys_interconnection_freq 1-50 Hz; dvpp_freq 1-100 Hz; instr_profiling on/off (not on Atlas "
        "training; A2/A3 use instr_profiling_freq); instr_profiling_freq 300-30000 Hz (A2/A3); host_sys and "
        "host_sys_usage: cpu and/or mem, comma-separated; host_sys_usage_freq 1-50 Hz (default 50). 004 "
        "defaults: sys_hardware_mem_freq 50, sys_io_sampling_freq 100, sys_interconnection_freq 50, "
        "dvpp_freq 50, instr_profiling_freq 1000. Rules: profiling training needs task_trace and "
        "training_trace on; instr_profiling_freq excludes training_trace, task_trace, hccl, aicpu, fp_point, "
        "bp_point, aic_metrics, l2, task_time and runtime_api; online inference supports task_trace and "
        "aicpu but not training_trace; read only when profiling_mode is True. Without a directly attached "
        "Ascend processor (remote deployment) output must be /var/log/npu/ (004 section 5.3). 002's "
        "initialize_system edition instead takes a ':'-separated list of training_trace, task_trace, "
        "op_trace (op_trace excludes the other two; task_trace also turns on training_trace) with fp_point "
        "and bp_point as separate options.",
        example={"output": "/tmp/profiling", "training_trace": "on", "fp_point": "", "bp_point": ""},
    ),
    OptionSpec(
        name="fp_point",
        type="s",
        area="profiling",
        scenario="training",
        status="deprecated",
        replacement="the fp_point key of profiling_options",
        description="Name of the first forward operator, where the iteration trace starts timing the forward pass.",
        notes="Only 002 (options of the initialize_system session) lists it as a session option of its own, "
        "required when the iteration trace is collected; 001 and 004 make it the fp_point key of "
        "profiling_options, the form to prefer. Type not stated (an operator name, so s). Get the name from "
        "the graph saved with tf.io.write_graph. The TF Adapter of CANN 9.0.0 no longer reads it as a "
        "session option (no fp_point / bp_point parameter in tf_adapter/util/npu_attrs.cc, "
        "hicann/tensorflow @ 82957b9; its default init options leave both empty).",
    ),
    OptionSpec(
        name="bp_point",
        type="s",
        area="profiling",
        scenario="training",
        status="deprecated",
        replacement="the bp_point key of profiling_options",
        description="Name of the last backward operator, where the iteration trace stops timing the backward pass.",
        notes="Only 002 (options of the initialize_system session) lists it as a session option of its own, "
        "required when the iteration trace is collected; 001 and 004 make it the bp_point key of "
        "profiling_options, the form to prefer. Type not stated (an operator name, so s). The TF Adapter "
        "of CANN 9.0.0 no longer reads it as a session option (no fp_point / bp_point parameter in "
        "tf_adapter/util/npu_attrs.cc, hicann/tensorflow @ 82957b9; its default init options leave both empty).",
    ),
    # -- aoe -----------------------------------------------------------------------------------------
    OptionSpec(
        name="aoe_mode",
        type="s",
        area="aoe",
        scenario="training",
        description="What the AOE tool tunes: subgraphs, operators, or the gradient split.",
        choices=("1", "2", "4"),
        products=_AOE_PRODUCTS,
        notes="'1' = subgraph tuning (not on Atlas A2/A3); '2' = operator tuning; '4' = gradient split tuning "
        "(apply its result with set_split_strategy_by_idx). Takes priority over the AOE_MODE environment "
        "variable. aoe_config_file's feature deeper_opat needs '2', nonhomo_split needs '1'.",
        example="2",
    ),
    OptionSpec(
        name="work_path",
        type="s",
        area="aoe",
        scenario="training",
        description="AOE working directory for its configuration and tuning results.",
        default_note="the current directory",
        form="path",
        writes=True,
        products=_AOE_PRODUCTS,
        notes="Must already exist where training runs and be readable and writable by the run user; absolute or "
        "relative to the script's directory.",
        example="/home/test/output",
    ),
    OptionSpec(
        name="aoe_config_file",
        type="s",
        area="aoe",
        scenario="training",
        description="Path of a JSON file naming the operators AOE should tune, to tune only the slow ones.",
        form="path",
        products=_AOE_PRODUCTS,
        notes="Keys: tune_ops_name (operator names after graph compilation, whole-word match), tune_ops_type "
        "(operator types, whole-word; fused operators containing one are tuned too) - the union of both is "
        "tuned; tune_optimization_level O1 (high-performance tuning) or O2 (normal, default); feature "
        "deeper_opat (needs aoe_mode 2) or nonhomo_split (needs aoe_mode 1).",
        example="/home/test/cfg/tuning_config.cfg",
    ),
    OptionSpec(
        name="auto_tune_mode",
        type="s",
        area="aoe",
        scenario="training",
        description="Tune TBE operators with the Auto Tune tool while they are compiled.",
        notes="Only 002 (options of the initialize_system session) documents it, without a type (its example "
        "value 'RL,GA' is text). Unset = automatic tuning off.",
        example="RL,GA",
    ),
    # -- operator_build ------------------------------------------------------------------------------
    OptionSpec(
        name="op_compiler_cache_mode",
        type="s",
        area="operator_build",
        scenario="both",
        description="Disk cache of compiled operators: reuse it, rebuild it, or do without.",
        default="enable",
        choices=("enable", "force", "disable"),
        notes="force deletes the cache, recompiles and refills it (after Python, library or tuning-repository "
        "changes; go back to enable afterwards); avoid force while several programs compile in parallel. "
        "disable or force is advised for the released model. Location: op_compiler_cache_dir. Ignored (no "
        "cache, all recompiled) when op_debug_level is non-zero or op_debug_config is set without "
        "op_debug_list; with op_debug_list and enable/force only the listed operators are recompiled. Size: "
        "op_cache.ini in the cache directory (max_op_cache_size in MB, -1 = no ageing; "
        "remain_cache_size_ratio 1-100 %; 004 names them ascend_max_op_cache_size / "
        "ascend_remain_cache_size_ratio; both must be valid) beats the environment variables "
        "ASCEND_MAX_OP_CACHE_SIZE / ASCEND_REMAIN_CACHE_SIZE_RATIO; defaults 500 MB and 50 %. Over the "
        "limit, files unused for more than half an hour are aged out.",
        example="enable",
    ),
    OptionSpec(
        name="op_compiler_cache_dir",
        type="s",
        area="operator_build",
        scenario="both",
        description="Directory of the operator compilation disk cache.",
        default_note="${ASCEND_CACHE_PATH}/kernel_cache when ASCEND_CACHE_PATH is set, else $HOME/atc_data",
        form="path",
        writes=True,
        notes="Allowed characters: letters, digits, '_', '-', '.' (000/004: Chinese characters too). The directory "
        "is created when missing, and a kernel_cache subdirectory inside it. Priority: op_compiler_cache_dir "
        "> ${ASCEND_CACHE_PATH}/kernel_cache (000: kernel_cache_<host id>) > $HOME/atc_data. op_cache.ini "
        "lives here.",
        example="/home/test/kernel_cache",
    ),
    OptionSpec(
        name="aicore_num",
        type="s",
        area="operator_build",
        scenario="both",
        description="Upper limits on the Cube and Vector cores used when compiling operators.",
        form="aicore_num",
        products=_A2_A3,
        notes="Text form N|M: N = most Cube cores, M = most Vector cores, each above 0 and at most what the "
        "processor has (cube_core_cnt / vector_core_cnt in <arch>-linux/data/platform_config/"
        "<soc_version>.ini). No effect on static shapes when existing binaries are reused (jit_compile "
        "false).",
        example={"cube": 2, "vector": 4},
    ),
    OptionSpec(
        name="oo_constant_folding",
        type="b",
        area="operator_build",
        scenario="both",
        description="Constant folding at graph compilation; can be turned off when folding raises memory use.",
        default=True,
        notes="With True, nodes marked _grappler_do_not_remove through Grappler are left unfolded. Some networks "
        "need folding (e.g. ExpandDims before HcomAllReduce, ConvBnFilterHost; errors such as EZ3003): keep "
        "True there and exempt single nodes with _grappler_do_not_remove.",
        example=True,
    ),
    # -- data_augmentation ---------------------------------------------------------------------------
    OptionSpec(
        name="local_rank_id",
        type="i",
        area="data_augmentation",
        scenario="both",
        description="This process's rank on its server, for the mode where one main process preprocesses for all.",
        min=0,
        max=7,
        notes="Recommendation-network data parallelism: the main process deduplicates data and sends it to the "
        "other processes' devices. Get the value from get_local_rank_id(). Goes with local_device_list. The TF "
        "Adapter refuses values outside 0-7 ('local rank id should be in [0,7]', CheckLocalRankId in "
        "tf_adapter/util/npu_attrs.cc, hicann/tensorflow @ 82957b9).",
        example=0,
    ),
    OptionSpec(
        name="local_device_list",
        type="s",
        area="data_augmentation",
        scenario="both",
        description="Devices the main process sends preprocessed data to.",
        form="int_list",
        notes="Text form: comma-separated device IDs. Used together with local_rank_id.",
        example=[0, 1],
    ),
    # -- exception_remedy ----------------------------------------------------------------------------
    OptionSpec(
        name="hccl_timeout",
        type="i",
        area="exception_remedy",
        scenario="both",
        description="Timeout for synchronising task execution between devices (collective communication).",
        default=1836,
        default_note="1836 s in 001 and 000; the 004 edition says 1800 s.",
        min=0,
        max=2147483647,
        notes="The unit is seconds. Atlas training products and the Atlas 300I Duo card: (0, 17340], and the value "
        "used is rounded down to a multiple of 68 s, 68 s when below 68 (600 -> 544). Atlas A2/A3: [0, "
        "2147483647], 0 = never time out. Takes precedence over the HCCL_EXEC_TIMEOUT environment variable. "
        "In cluster training stream_sync_timeout (milliseconds) must exceed it. 000/004 list it for "
        "training only.",
        example=1800,
    ),
    OptionSpec(
        name="op_wait_timeout",
        type="i",
        area="exception_remedy",
        scenario="both",
        description="How long an operator may wait before it is reported as timed out.",
        default=120,
        notes="The unit is seconds. 000/004 list it for training only.",
        example=120,
    ),
    OptionSpec(
        name="op_execute_timeout",
        type="i",
        area="exception_remedy",
        scenario="both",
        description="How long an operator may run before it is reported as timed out.",
        notes="The unit is seconds. No default is documented. 000/004 list it for training only.",
        example=90,
    ),
    OptionSpec(
        name="stream_sync_timeout",
        type="i",
        area="exception_remedy",
        scenario="both",
        description="Timeout for stream synchronisation while the graph executes.",
        default=-1,
        notes="The unit is milliseconds. -1 (default) = wait without limit and raise no error. In cluster training it "
        "must be greater than the collective timeout, hccl_timeout or HCCL_EXEC_TIMEOUT, which are in "
        "seconds. 000/004 list it for training only.",
        example=60000,
    ),
    OptionSpec(
        name="event_sync_timeout",
        type="i",
        area="exception_remedy",
        scenario="both",
        description="Timeout for event synchronisation while the graph executes.",
        default=-1,
        notes="The unit is milliseconds. -1 (default) = wait without limit and raise no error. 000/004 list it for "
        "training only.",
        example=60000,
    ),
    # -- experimental --------------------------------------------------------------------------------
    OptionSpec(
        name="graph_compiler_cache_dir",
        type="s",
        area="experimental",
        scenario="both",
        description="Directory caching graph compilation results on disk so later runs load instead of compiling.",
        form="path",
        writes=True,
        status="experimental",
        notes="A non-empty value turns the cache on. The directory must exist or compilation fails. A changed "
        "graph needs its cache deleted or rebuilt; caches do not survive version upgrades (clear them). Not "
        "for models with resource operators.",
        example="/root/build_cache_dir",
    ),
    OptionSpec(
        name="jit_compile",
        type="s",
        area="experimental",
        scenario="both",
        description="Compile operators online, or prefer operator binaries that are already built.",
        default="auto",
        choices=("auto", "true", "false"),
        status="experimental",
        notes="auto = online for static shapes, binaries first (compile when missing) for dynamic shapes; true = "
        "always online, tuned on the graph; false = binaries first, compile only when none fits. Large "
        "recommendation networks only. shape_generalization_mode applies with true; aicore_num has no "
        "effect on static shapes with false.",
        example="auto",
    ),
    OptionSpec(
        name="shape_generalization_mode",
        type="s",
        area="experimental",
        scenario="both",
        description="How shapes are generalised between iterations when operators compile online.",
        default="STRICT",
        choices=("STRICT", "FULL", "ADAPTIVE"),
        status="experimental",
        notes="For jit_compile=true. STRICT = each iteration's shape as is; FULL = every axis to -1 once a shape "
        "changes; ADAPTIVE = only the changed axes to -1. No effect when compile_dynamic_mode is True.",
        example="FULL",
    ),
    OptionSpec(
        name="experimental_accelerate_train_mode",
        type="s",
        area="experimental",
        scenario="training",
        description="Run a share of a long (over an hour) training at reduced precision to finish sooner.",
        form="accelerate_train_mode",
        status="experimental",
        notes="Text form type|trigger|ratio. type: fast (reduced part compiled in float16) or fast1 (bfloat16). "
        "trigger: step or loss, splitting training into a low- and a high-precision part by step count or "
        "by loss. ratio: low-precision share, 0.2 to 0.9 for step (default 0.9), 1.01 to 1.5 for loss "
        "(default 1.05). Needs precision_mode unset/none, allow_fp32_to_fp16 or must_keep_origin_dtype, or "
        "precision_mode_v2 unset/none or origin. With step the script sets the environment variables "
        "STEP_NOW and TOTAL_STEP, with loss LOSS_NOW and TARGET_LOSS, updated every run. Small loops "
        "(iterations_per_loop) can make the split inaccurate. The network must converge; short jobs may "
        "gain nothing.",
        example={"type": "fast", "trigger": "step", "ratio": 0.9},
    ),
    OptionSpec(
        name="auto_multistream_parallel_mode",
        type="s",
        area="experimental",
        scenario="training",
        description="Run Cube and Vector operators in parallel in static-shape graphs of recommendation networks.",
        choices=("cv",),
        status="experimental",
        notes="cv = on; unset = off. Static-shape graphs and recommendation networks only. Cannot be combined "
        "with multi-stream concurrency through the ENABLE_DYNAMIC_SHAPE_MULTI_STREAM environment variable.",
        example="cv",
    ),
    # -- compression (004 only: quantisation and compression) ----------------------------------------
    OptionSpec(
        name="enable_compress_weight",
        type="b",
        area="compression",
        scenario="inference",
        description="Compress all weights for the AI Core, decompressed during computation to save bandwidth.",
        default=False,
        notes="Only in 004 (section 7.1, quantisation and compression). Not together with compress_weight_conf.",
        example=True,
    ),
    OptionSpec(
        name="compress_weight_conf",
        type="s",
        area="compression",
        scenario="inference",
        description="Path of a file listing the nodes (conv, fully connected) whose weights are compressed.",
        form="path",
        notes="Only in 004. The file holds node names separated by ';', as written by AMCT (e.g. "
        "module_nuq_layer_record.txt). Allowed characters: letters, digits, '_', '-', '.', Chinese. Not "
        "together with enable_compress_weight.",
        example="/home/test/compress_weight_nodes.cfg",
    ),
    # -- deprecated ----------------------------------------------------------------------------------
    OptionSpec(
        name="op_debug_level",
        type="i",
        area="deprecated",
        scenario="both",
        description="Operator debug level: which debug files the build keeps and whether compiler optimisation is off.",
        default_note="Unset (disabled) in 001/004; 002 gives 0.",
        choices=(0, 1, 2, 3, 4),
        status="deprecated",
        notes="0 = debug off; 1 = debug on, TBE mapping files (.cce, _loc.json, .o, .json) in kernel_meta; 2 = as "
        "1 with CCE optimisation off (-O0 -g); 3 = off, keep .o and .json; 4 = off, keep .o/.json and write "
        ".cce and {kernel_name}_compute.json. 0 or 3 advised for training, 1/2 cost speed. 2 cannot go with "
        "oom in op_debug_config and may break dynamic-shape builds. Non-zero: files go to debug_dir when "
        "set, and the operator compile cache is ignored. 0 with op_debug_config still creates kernel_meta; "
        "0 with NPU_COLLECT_PATH creates kernel_meta in the current directory, or under ASCEND_WORK_PATH "
        "when set. No .o/.json/.cce for MC2 operators.",
        example=0,
    ),
    OptionSpec(
        name="enable_data_pre_proc",
        type="b",
        area="deprecated",
        scenario="training",
        description="Offload the GetNext operator to the device, which offloading the training loop depends on.",
        default=False,
        status="deprecated",
        notes="Needs the input read through a TensorFlow Dataset.",
        example=True,
    ),
    OptionSpec(
        name="variable_format_optimize",
        type="b",
        area="deprecated",
        scenario="training",
        description="Convert variables at initialisation to device-friendly layouts such as NC1HWC0.",
        default_note="Unset (disabled).",
        status="deprecated",
        example=True,
    ),
    OptionSpec(
        name="op_select_implmode",
        type="s",
        area="deprecated",
        scenario="both",
        description="High-precision or high-performance implementation for built-in operators offering both.",
        default_note="Unset (disabled) in 001/004; 001, 002 and 003 also call high_performance the default.",
        # the _for_all modes: the TF Adapter accepts all four (CheckOpImplMode, tf_adapter/util/npu_attrs.cc,
        # hicann/tensorflow @ 82957b9), as the ATC flag does (003); 001/004 document the first two
        choices=("high_precision", "high_performance", "high_precision_for_all", "high_performance_for_all"),
        status="deprecated",
        replacement="op_precision_mode",
        notes="high_precision improves float16 accuracy (Taylor/Newton methods); high_performance is the fastest "
        "kernel that keeps float16 network accuracy. Ignored when op_precision_mode is set. 003 (the ATC "
        "flag of the same name, which also has high_precision_for_all / high_performance_for_all) advises "
        "op_precision_mode .ini files instead; operators with one implementation keep it.",
        example="high_precision",
    ),
    OptionSpec(
        name="optypelist_for_implmode",
        type="s",
        area="deprecated",
        scenario="both",
        description="Operator types that take the mode chosen by op_select_implmode.",
        form="name_list",
        status="deprecated",
        replacement="op_precision_mode",
        notes="Comma-separated; supported types Pooling, SoftmaxV2, LRN, ROIAlign (002: Pooling only). Needs "
        "op_select_implmode. Ignored when op_precision_mode is set.",
        example=["Pooling", "SoftmaxV2"],
    ),
    OptionSpec(
        name="dynamic_input",
        type="b",
        area="deprecated",
        scenario="both",
        description="Declare the graph's inputs dynamic (the older dynamic-input mechanism).",
        default=False,
        status="deprecated",
        notes="Enables dynamic_graph_execute_mode and dynamic_inputs_shape_range. For subgraphs with different "
        "input shapes 004 points to set_graph_exec_config (whose own dynamic arguments are also to go); "
        "settings made there beat session options.",
        example=True,
    ),
    OptionSpec(
        name="dynamic_graph_execute_mode",
        type="s",
        area="deprecated",
        scenario="both",
        description="Execution mode for dynamic inputs; dynamic_execute compiles with dynamic_inputs_shape_range.",
        choices=("dynamic_execute",),
        status="deprecated",
        notes="Effective only with dynamic_input=True.",
        example="dynamic_execute",
    ),
    OptionSpec(
        name="dynamic_inputs_shape_range",
        type="s",
        area="deprecated",
        scenario="both",
        description="Shape ranges of the dynamic dataset and placeholder inputs (older dynamic-input mechanism).",
        form="shape_range",
        status="deprecated",
        notes="Text form getnext:[d,...],[d,...];data:[d,...] with getnext = dataset inputs, data = placeholders "
        "(no other keys, 004). A dimension is a fixed size, low~high, or -1 (unbounded); a scalar is [] "
        "with no space before '['. Every input is listed in order, fixed ones with their sizes. "
        "Placeholders follow definition order when unnamed and name order when named; unnamed ones are "
        "called xxx_0, xxx_1, ... and sort as text (xxx_10 before xxx_2), so name them when there are more "
        "than 10. Constants cannot be user inputs. Covers one graph; for subgraphs with different shapes "
        "use set_graph_exec_config. Ignored when dynamic_dims is set. Used with dynamic_input=True and "
        "dynamic_graph_execute_mode=dynamic_execute. 004's 7.1 example separates the getnext shapes with ';'.",
        example={"getnext": [[128, "3~5", "2~128", -1], [64, "3~5", "2~128", -1]], "data": [[128, "3~5", "2~128", -1]]},
    ),
    OptionSpec(
        name="graph_memory_max_size",
        type="s",
        area="deprecated",
        scenario="both",
        description="Formerly the size of static plus maximum dynamic graph memory; ignored now.",
        status="deprecated",
        notes="No effect in this version: memory is allocated by actual use. The seeds give no type or example "
        "(s is assumed).",
    ),
    OptionSpec(
        name="variable_memory_max_size",
        type="s",
        area="deprecated",
        scenario="both",
        description="Formerly the size of variable memory; ignored now.",
        status="deprecated",
        notes="No effect in this version: memory is allocated by actual use. The seeds give no type or example "
        "(s is assumed); the scenario comes from 004, as 001 and 000 are cut off here.",
    ),
)
