"""The GPU tools' pure parts (tools/_cli.py): shapes, knobs, variants and grids as the command line
gives them, and bad input as one line on stderr with exit code 2 before anything touches a GPU."""

import pytest

from tools._cli import InputError, grid, parse_knobs, parse_shapes, parse_value, shape_name, split_module_knobs, variants


def test_a_shape_with_alternatives_is_every_combination_with_the_defaults_filled_in():
    got = parse_shapes("attention", "mla:H=64:C=1/8:L=1024/8192")
    assert [(s["C"], s["L"]) for s in got] == [(1, 1024), (1, 8192), (8, 1024), (8, 8192)]
    assert all(s == dict(kind="mla", H=64, C=s["C"], q=1, L=s["L"]) for s in got)
    assert parse_shapes("attention", "llama:L=4096") == [dict(kind="llama", C=1, q=1, L=4096)]
    moe, = parse_shapes("moe_w4a16", "kimi_tp8:T=2")
    assert moe == dict(kind="kimi_tp8", T=2, H=0, I=0, E=0, k=0) and shape_name(moe) == "kimi_tp8:T=2"
    assert parse_shapes("ddtree", "ddtree:C=8:B=256")[0]["V"] == 163840


@pytest.mark.parametrize("kernel,spec,says", [
    ("attention", "mla:H=64", "L not given"),
    ("attention", "mlx:L=8", "unknown kind 'mlx'"),
    ("attention", "llama:H=8:L=8", "'H=8' is not key=value with a key of llama"),
    ("attention", "qwen:L=1k", "takes whole numbers"),
    ("attention", "qwen:L=0", "must be positive"),
    ("moe_w4a16", "kimi:T=", "takes whole numbers"),
    ("moe_bf16", "kimi:T=1", "unknown kind 'kimi'"),
    ("gemm", "x:M=1", "unknown kernel 'gemm'"),
])
def test_a_bad_shape_is_refused_with_what_is_wrong(kernel, spec, says):
    with pytest.raises(InputError, match=says):
        parse_shapes(kernel, spec)


def test_knobs_read_values_nest_config_fields_and_keep_module_constants_apart():
    assert [parse_value(v) for v in ("8", "0.5", "true", "False", "none", "bf16")] == [8, 0.5, True, False, None, "bf16"]
    k = parse_knobs("num_warps=8,gate_up_config.split_k=7,gate_up_config.block_n=32,@ATOMIC_READ=false")
    assert k == {"num_warps": 8, "gate_up_config": {"split_k": 7, "block_n": 32}, "@ATOMIC_READ": False}
    assert split_module_knobs(k) == ({"num_warps": 8, "gate_up_config": {"split_k": 7, "block_n": 32}},
                                     {"ATOMIC_READ": False})
    for bad in ("num_warps", "=8", "a=1,a=2", "@X.y=1", "a=1,a.b=2"):
        with pytest.raises(InputError):
            parse_knobs(bad)


def test_variants_start_from_the_defaults_and_a_grid_names_each_combination():
    assert variants(["w8:num_warps=8", "r16:block_r=16,num_splits=33"]) == {
        "default": {}, "w8": {"num_warps": 8}, "r16": {"block_r": 16, "num_splits": 33}}
    assert variants([], default=True) == {"default": {}}
    with pytest.raises(InputError, match="given twice"):
        variants(["a:x=1", "a:x=2"])
    with pytest.raises(InputError, match="no name"):
        variants([":x=1"])
    g = grid(["block_s=32/64", "num_stages=2/3"])
    assert list(g) == ["block_s=32,num_stages=2", "block_s=32,num_stages=3", "block_s=64,num_stages=2",
                       "block_s=64,num_stages=3"]
    assert g["block_s=64,num_stages=3"] == {"block_s": 64, "num_stages": 3}
    for bad in (["block_s"], ["a=1", "a=2"], ["a=1,b=2"]):
        with pytest.raises(InputError):
            grid(bad)


@pytest.mark.parametrize("tool,argv,says", [
    ("ab", ["attention", "--shape", "mla:H=64"], "L not given"),
    ("ab", ["attention", "--shape", "mla:L=64", "--variant", "w8:num_warps"], "is not key=value"),
    ("ab", ["moe_w4a16", "--shape", "kimi:T=1", "--rounds", "0"], "--rounds must be at least 1"),
    ("sweep", ["attention", "--shape", "llama:L=64", "--grid", "block_s"], "is not key=value/value"),
    ("ncu", ["attention", "--shape", "mla:L=64/128"], "stands for 2 shapes"),
    ("stress", ["moe_w4a16", "--shape", "kimi:T=1", "--calls", "0"], "--calls must be at least 1"),
    ("offline_compile", ["attention", "--config", "block_r=16"], "kind not given"),
    ("sass_census", ["--block-n", "48"], "must be a power of two"),
])
def test_bad_input_is_one_line_and_exit_code_2(tool, argv, says, capsys):
    import importlib

    main = importlib.import_module(f"tools.{tool}").main
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and says in err and err.startswith(f"{tool}: ")
