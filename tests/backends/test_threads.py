"""num_threads: applied before the framework starts its pools, read back in a real kernel, recorded."""

from __future__ import annotations

import json

import pytest

from tests.frameworks import run_python

RUN = """
    import json, os
    from benchlib import run_environment
    run_environment(dict(
        environment="threads", framework={framework!r}, mode={mode!r}, models=["bert-base-cased"], model_scale="tiny",
        batch_sizes=[1], sequence_lengths=[8], repeat=2, number=1, num_threads={threads}, output_dir={out!r},
    ), progress=False)
"""


@pytest.mark.e2e
# Two threads differ from the default of a test worker's one core: make test reads them back; `--full` one thread too.
@pytest.mark.parametrize("threads", [pytest.param(1, marks=pytest.mark.full), 2])
def test_pytorch_threads_read_back(tmp_path, threads):
    out = str(tmp_path / "env")
    after = run_python(RUN.format(framework="pytorch", mode="eager", threads=threads, out=out) + """
    import torch
    from benchlib.backends.pytorch import thread_settings
    print(json.dumps({**thread_settings(), "omp_env_seen_by_torch": "OMP_NUM_THREADS : " + os.environ["OMP_NUM_THREADS"] in torch.__config__.parallel_info()}))
    """)
    recorded = json.loads((tmp_path / "env" / "environment.json").read_text())["threads"]
    assert recorded["num_threads"] == recorded["openmp_threads"] == recorded["mkl_threads"] == threads
    assert recorded["OMP_NUM_THREADS"] == recorded["MKL_NUM_THREADS"] == str(threads)
    assert after["num_threads"] == after["openmp_threads"] == after["mkl_threads"] == threads
    assert after["omp_env_seen_by_torch"]


@pytest.mark.e2e
@pytest.mark.full
@pytest.mark.parametrize("threads", [1, 2])
def test_tensorflow_threads_read_back(tmp_path, threads):
    out = str(tmp_path / "env")
    after = run_python(RUN.format(framework="tensorflow", mode="function", threads=threads, out=out) + """
    import tensorflow as tf
    from benchlib.backends.tensorflow import set_thread_pool
    try:
        set_thread_pool("intra", 3)  # the runtime has started: too late
        late = ""
    except RuntimeError as error:
        late = str(error)
    print(json.dumps({
        "intra_op": tf.config.threading.get_intra_op_parallelism_threads(),
        "env": os.environ["TF_NUM_INTRAOP_THREADS"], "late": late,
    }))
    """)
    recorded = json.loads((tmp_path / "env" / "environment.json").read_text())["threads"]
    assert recorded["num_threads"] == recorded["intra_op_threads_configured"] == threads
    assert recorded["OMP_NUM_THREADS"] == str(threads)
    assert after["intra_op"] == threads and after["env"] == str(threads)
    assert after["late"].startswith("num_threads: TensorFlow's runtime has already started in this process")


@pytest.mark.e2e
def test_tensorflow_default_threads_are_recorded_as_in_effect():
    recorded = run_python("""
        import json, os
        os.environ.pop("TF_NUM_INTRAOP_THREADS", None)
        from benchlib.backends import load_backend
        print(json.dumps({**load_backend("tensorflow", "function").settings(), "cpus": len(os.sched_getaffinity(0))}))
    """)
    assert recorded["intra_op_threads_configured"] == 0  # TensorFlow's default: the schedulable CPUs
    assert recorded["num_threads"] == recorded["cpus"]


@pytest.mark.e2e
def test_tensorflow_refuses_a_gpu_it_does_not_see():
    from tests.frameworks import run_python

    message = run_python(
        """
        import json
        from benchlib.backends import load_backend
        try:
            load_backend("tensorflow", "xla", "cuda")
        except RuntimeError as exc:
            print(json.dumps(str(exc)))
        """
    )
    assert message == "device cuda: TensorFlow sees 0 GPU(s) on this machine"


@pytest.mark.e2e
@pytest.mark.parametrize("framework, mode", [("pytorch", "eager"), ("tensorflow", "function")])
def test_cores_and_inter_op_threads_are_applied_and_read_back(framework, mode):
    recorded = run_python(f"""
        import json, os
        from benchlib.backends import load_backend
        print(json.dumps({{**load_backend({framework!r}, {mode!r}, "cpu", "cores", 1).settings(), "cpus": len(os.sched_getaffinity(0))}}))
    """)
    assert recorded["num_threads"] == recorded["cpus"] and recorded["num_interop_threads"] == 1


def test_shipped_cpu_environments_pin_the_same_thread_counts():
    import yaml

    from benchlib.paths import PARAMETERS_DIR

    files = sorted((PARAMETERS_DIR / "environments").glob("cpu-*.yaml"))
    pinned = {path.stem: {key: yaml.safe_load(path.read_text()).get(key) for key in ("num_threads", "num_interop_threads")} for path in files}
    assert len(pinned) >= 4 and all(value == {"num_threads": "cores", "num_interop_threads": 1} for value in pinned.values()), pinned
