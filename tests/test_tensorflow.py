"""The TensorFlow adapter: tensors in and out without copies; tf.function and GradientTape."""

from __future__ import annotations

import array
import os
import sys

import numpy as np
import pytest

import cuscan
import cuscan.signal
from cuscan import _backend
from tests import reference
from tests.conftest import (
    assert_close,
    decays_near_one,
    record_core_calls,
    require,
    run_in_fresh_process,
)

tf = require("tensorflow")
from cuscan import _tensorflow  # noqa: E402  (needs tensorflow)

DTYPES = [tf.float16, tf.bfloat16, tf.float32, tf.float64, tf.complex64, tf.complex128]


def scan(decays, impulses, initial_state, reverse=False):
    """The recurrence in TensorFlow itself, with ``tf.scan``, for comparison."""
    decays, impulses = tf.broadcast_to(decays, tf.shape(impulses)), impulses
    return tf.scan(lambda h, step: step[0] * h + step[1], (decays, impulses),
                   initializer=tf.broadcast_to(initial_state, impulses.shape[1:]),
                   reverse=reverse)


def _numpy(tensor, wide):
    return _tensorflow.to_array(tensor).astype(wide)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("method", ["serial", "parallel"])
@pytest.mark.parametrize("reverse", [False, True])
def test_forward_matches_reference(dtype, method, reverse):
    rng = np.random.default_rng(0)
    values = [rng.uniform(0.5, 1, (300, 4)), rng.standard_normal((300, 4)),
              rng.standard_normal(4)]
    if dtype.is_complex:
        values = [v * np.exp(0.3j) for v in values]
    decays, impulses, state = (tf.cast(tf.constant(v), dtype) for v in values)
    h = cuscan.linear_recurrence(decays, impulses, state, method=method, reverse=reverse)
    assert isinstance(h, tf.Tensor)
    assert h.dtype == dtype
    wide = np.complex128 if dtype.is_complex else np.float64
    as_numpy = [_numpy(v, wide) for v in (decays, impulses, state)]
    expected = reference.linear_recurrence(*as_numpy, reverse=reverse)
    scale = reference.error_scale(*as_numpy, reverse=reverse)
    assert_close(_numpy(h, wide), expected, scale, _tensorflow.to_array(h).dtype, 300)


def test_layouts_broadcasting_and_scalars():
    rng = np.random.default_rng(1)
    impulses = tf.transpose(tf.constant(rng.standard_normal((6, 50, 2))), (1, 2, 0))
    decays = tf.constant(rng.uniform(0, 1, 6))
    h = cuscan.linear_recurrence(decays, impulses, 1.0, axis=0)
    expected = reference.linear_recurrence(decays.numpy(), impulses.numpy(), 1.0)
    np.testing.assert_allclose(h.numpy(), expected, rtol=1e-12)
    h = cuscan.linear_recurrence(0.5, impulses, axis=-1)
    expected = reference.linear_recurrence(0.5, np.moveaxis(impulses.numpy(), -1, 0))
    np.testing.assert_allclose(np.moveaxis(h.numpy(), -1, 0), expected, rtol=1e-12)
    assert cuscan.linear_recurrence(0.5, tf.cast(impulses, tf.float32)).dtype == tf.float32
    assert cuscan.linear_recurrence(0.5j, tf.cast(impulses, tf.float32)).dtype == tf.complex64
    # NumPy arrays and sequences beside tensors, converted as TensorFlow converts them
    expected = reference.linear_recurrence(decays.numpy(), impulses.numpy(), 1.0)
    h = cuscan.linear_recurrence(decays.numpy(), impulses, np.ones((2, 6)), axis=0)
    assert isinstance(h, tf.Tensor)
    np.testing.assert_allclose(h.numpy(), expected, rtol=1e-12)
    for state in ([1.0] * 6, array.array("d", [1.0] * 6), memoryview(np.ones(6))):
        h = cuscan.linear_recurrence(decays, impulses.numpy(), state, axis=0)
        np.testing.assert_allclose(h.numpy(), expected, rtol=1e-12)
    x = tf.ones(3)
    with tf.GradientTape() as tape:
        tape.watch(x)
        h = cuscan.linear_recurrence(np.full(3, 0.5, np.float32), x)
    assert h.dtype == tf.float32
    np.testing.assert_allclose(tape.gradient(h, x).numpy(), [1.75, 1.5, 1])
    assert cuscan.linear_recurrence(1, tf.range(3)).dtype == tf.float64
    assert cuscan.linear_recurrence(decays, tf.zeros((0, 6), tf.float64)).shape == (0, 6)


def test_variables_and_tf_function():
    weights = tf.Variable(tf.fill((4, 2), 0.5))

    @tf.function
    def step(impulses):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(cuscan.linear_recurrence(weights, impulses) ** 2)
        return loss, tape.gradient(loss, weights)

    impulses = tf.ones((4, 2))
    loss, grad = step(impulses)
    with tf.GradientTape() as tape:
        expected_loss = tf.reduce_sum(scan(weights, impulses, 0.0) ** 2)
    np.testing.assert_allclose(loss.numpy(), expected_loss.numpy(), rtol=1e-6)
    np.testing.assert_allclose(grad.numpy(), tape.gradient(expected_loss, weights).numpy(),
                               rtol=1e-6)


def _gradients(decays, impulses):
    with tf.GradientTape() as tape:
        tape.watch([decays, impulses])
        loss = tf.reduce_sum(cuscan.linear_recurrence(decays, impulses) ** 2)
    return tape.gradient(loss, [decays, impulses])


def test_tf_function_with_unknown_dimensions():
    """Shapes with unknown sizes, also for gradients summed over a broadcast decay whose
    size, 1 or the channels', is known only when the function runs."""
    function = tf.function(lambda a, x: cuscan.linear_recurrence(a, x, reverse=True),
                           input_signature=[tf.TensorSpec([None], tf.float32),
                                            tf.TensorSpec([None, None], tf.float32)])
    h = function(tf.fill((3,), 0.5), tf.ones((5, 3)))
    assert h.shape == (5, 3)
    np.testing.assert_allclose(h.numpy(), reference.linear_recurrence(
        0.5, np.ones((5, 3)), reverse=True), rtol=1e-6)
    x = tf.constant(np.random.default_rng(6).standard_normal((5, 3)))
    for impulses in ([None, None], [5, 3]):
        gradients = tf.function(_gradients, input_signature=[
            tf.TensorSpec([None], tf.float64), tf.TensorSpec(impulses, tf.float64)])
        for a in (tf.constant([0.5, 0.9, -0.3], tf.float64), tf.constant([0.7], tf.float64)):
            for got, expected in zip(gradients(a, x), _gradients(a, x), strict=True):
                assert got.shape == expected.shape
                np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-12)
    with pytest.raises(ValueError, match="cuscan needs tensors of known rank"):
        tf.function(lambda x: cuscan.linear_recurrence(0.5, x),
                    input_signature=[tf.TensorSpec(None, tf.float32)]).get_concrete_function()


def test_tf_function_calls_cuscan_as_written(monkeypatch):
    """AutoGraph does not rewrite cuscan's functions (a rewrite costs most of a trace)."""
    package = os.path.dirname(cuscan.__file__)
    callers = []
    library = _backend.library

    def spy(value):
        frame = sys._getframe(1)
        while frame.f_code.co_filename.startswith(package):
            frame = frame.f_back
        callers.append(frame.f_code.co_filename)
        return library(value)

    monkeypatch.setattr(_backend, "library", spy)
    sos = np.array([[1.0, 0.5, 0.0, 1.0, -0.5, 0.0]])
    b, a = [1.0, 0.5], [1.0, -0.5]
    calls = [lambda x: cuscan.linear_recurrence(0.5, x),
             lambda x: cuscan.linear_recurrence_vjp(x, 0.5, x)[1],
             lambda x: cuscan.signal.lfilter(b, a, x),
             lambda x: cuscan.signal.sosfilt(sos, x),
             lambda x: cuscan.signal.filtfilt(b, a, x, padlen=2),
             lambda x: cuscan.signal.sosfiltfilt(sos, x, padlen=2),
             lambda x: cuscan.signal.ema(x, 0.5)]
    for call in calls:
        tf.function(call)(tf.ones(8))
    # a rewritten function runs from a file AutoGraph generates
    assert callers
    assert not [caller for caller in callers if "autograph_generated" in caller]
    public = [getattr(cuscan, name) for name in cuscan.__all__]
    public += [getattr(cuscan.signal, name) for name in cuscan.signal.__all__]
    assert all(hasattr(function, "autograph_info__") for function in public)


@pytest.mark.parametrize("graph", [False, True])
@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16, tf.complex128])
def test_no_copies(monkeypatch, graph, dtype):
    forward = record_core_calls(monkeypatch, "forward")
    backward = record_core_calls(monkeypatch, "backward")
    decays, impulses, state = (tf.cast(tf.fill(shape, 0.5), dtype)
                               for shape in ((64, 3), (64, 3), (3,)))

    def run(a, x, s):
        with tf.GradientTape() as tape:
            tape.watch([a, x, s])
            h = cuscan.linear_recurrence(a, x, s)
        return h, tape.gradient(h, [a, x, s], output_gradients=h)

    h, grads = tf.function(run)(decays, impulses, state) if graph else run(decays, impulses,
                                                                          state)

    def pointer(value):
        return _tensorflow.to_array(value).ctypes.data

    assert [a.ctypes.data for a in forward["inputs"]] == [pointer(v) for v in
                                                          (decays, impulses, state)]
    assert forward["out"][0].ctypes.data == pointer(h)
    assert [o.ctypes.data for o in backward["out"]] == [pointer(g) for g in grads]


def test_conversions_share_memory():
    for dtype in (tf.float32, tf.bfloat16, tf.complex64, tf.float16):
        tensor = tf.cast(tf.reshape(tf.range(35), (7, 5)), dtype)
        array = _tensorflow.to_array(tensor)
        assert array.shape == (7, 5)
        assert not array.flags.writeable  # TensorFlow's memory is never written
        result = _tensorflow._empty(array.shape, array.dtype, array)
        back = _tensorflow.from_array(result)
        assert back.dtype == dtype
        assert _tensorflow.to_array(back).ctypes.data == result.ctypes.data
    # What TensorFlow cannot take in place (unaligned, strided) is copied, never crashed on.
    raw = np.arange(40, dtype=np.float32)
    for array in (raw[1:33], raw[::2], raw[1:31].reshape(5, 6).T, tensor.numpy()):
        np.testing.assert_array_equal(_tensorflow.from_array(array).numpy(), array)


def test_inputs_not_modified():
    decays, impulses = tf.fill((200, 3), 0.7), tf.ones((200, 3), tf.float64) * 2
    decays = tf.cast(decays, tf.float64)
    copies = decays.numpy().copy(), impulses.numpy().copy()
    with tf.GradientTape() as tape:
        tape.watch([decays, impulses])
        h = cuscan.linear_recurrence(decays, impulses, reverse=True)
    tape.gradient(h, [decays, impulses])
    np.testing.assert_array_equal(decays.numpy(), copies[0])
    np.testing.assert_array_equal(impulses.numpy(), copies[1])


def _operands(rng, length: int, dtype: tf.DType) -> list[np.ndarray]:
    """Time-invariant decays, (length, 2, 3) impulses and a broadcast initial state,
    rotated by random phases for a complex dtype."""
    values = [rng.uniform(0, 0.9, 3), rng.standard_normal((length, 2, 3)),
              rng.standard_normal((1, 3))]
    if dtype.is_complex:
        values = [v * np.exp(1j * rng.uniform(0, 6, v.shape)) for v in values]
    return values


@pytest.mark.parametrize("dtype", [tf.float64, tf.complex128])
@pytest.mark.parametrize("method", ["serial", "parallel"])
@pytest.mark.parametrize("reverse", [False, True])
def test_gradients_match_gradient_tape(dtype, method, reverse):
    values = _operands(np.random.default_rng(2), 17, dtype)
    inputs = [tf.constant(v) for v in values]
    weights = tf.constant(np.arange(17 * 2 * 3).reshape(17, 2, 3) % 5, tf.float64)

    def gradients(function):
        with tf.GradientTape() as tape:
            tape.watch(inputs)
            loss = tf.reduce_sum(tf.abs(function(*inputs)) ** 2 * weights)
        return tape.gradient(loss, inputs)

    ours = gradients(lambda a, x, s: cuscan.linear_recurrence(a, x, s, reverse=reverse,
                                                              method=method))
    theirs = gradients(lambda a, x, s: scan(a, x, s, reverse=reverse))
    for mine, expected in zip(ours, theirs, strict=True):
        assert mine.shape == expected.shape
        np.testing.assert_allclose(mine.numpy(), expected.numpy(), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("dtype", [tf.float64, tf.complex128])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("graph", [False, True])
def test_second_order_and_forward_mode(dtype, reverse, graph):
    values = _operands(np.random.default_rng(3), 9, dtype)
    inputs = [tf.constant(v) for v in values]
    directions = [tf.constant(np.cos(np.arange(v.size)).reshape(v.shape), dtype) for v in values]

    def second_order(function):
        with tf.GradientTape() as outer:
            outer.watch(inputs)
            with tf.GradientTape() as inner:
                inner.watch(inputs)
                loss = tf.reduce_sum(tf.abs(function(*inputs)) ** 2)
            first = inner.gradient(loss, inputs)
            # a real function of the gradients, so its gradient is defined for complex inputs
            total = sum(tf.reduce_sum(tf.math.real(g * tf.math.conj(d)))
                        for g, d in zip(first, directions, strict=True))
        return [*first, *outer.gradient(total, inputs)]

    def forward_mode(function):  # the tangent of the output along `directions`
        with tf.autodiff.ForwardAccumulator(inputs, directions) as accumulator:
            output = function(*inputs)
        return [accumulator.jvp(output)]

    def ours(a, x, s):
        return cuscan.linear_recurrence(a, x, s, reverse=reverse)

    def theirs(a, x, s):
        return scan(a, x, s, reverse=reverse)

    checks = [second_order] + ([] if graph else [forward_mode])
    for derivatives in checks:
        mine = (tf.function(derivatives) if graph else derivatives)(ours)
        for value, expected in zip(mine, derivatives(theirs), strict=True):
            assert value is not None
            np.testing.assert_allclose(value.numpy(), expected.numpy(), rtol=1e-10, atol=1e-10)
    if graph:
        with pytest.raises(NotImplementedError, match=r"works eagerly but not inside tf\.function"):
            tf.function(forward_mode)(ours)


@pytest.mark.parametrize("dtype", [tf.float64, tf.complex128])
@pytest.mark.parametrize("reverse", [False, True])
def test_vjp_function_is_differentiable(dtype, reverse):
    """``linear_recurrence_vjp`` under a tape is differentiable (its Jacobian matches finite
    differences), with broadcast decays and state, and gives the values it gives without."""
    rng = np.random.default_rng(4)
    operands = [tf.cast(rng.standard_normal(shape) * scale, dtype) for shape, scale in
                (((6, 2, 3), 1), ((1, 3), 0.5), ((6, 2, 3), 1), ((3,), 1))]
    expected = cuscan.linear_recurrence_vjp(*operands, reverse=reverse)
    with tf.GradientTape() as tape:
        tape.watch(operands)
        taped = cuscan.linear_recurrence_vjp(*operands, reverse=reverse)
    for mine, theirs in zip(taped, expected, strict=True):
        np.testing.assert_allclose(mine, theirs, rtol=1e-12)

    def flat(*values):
        grads = cuscan.linear_recurrence_vjp(*values, reverse=reverse)
        return tf.concat([tf.reshape(g, [-1]) for g in grads], 0)

    theoretical, numerical = tf.test.compute_gradient(flat, operands, delta=1e-6)
    for mine, differences in zip(theoretical, numerical, strict=True):
        np.testing.assert_allclose(mine, differences, atol=1e-7)


def test_map_fn_and_vectorized_map():
    """Mapped over a batch, by tf.map_fn (values and gradients) or tf.vectorized_map (values),
    cuscan gives what one call over the whole batch gives."""
    rng = np.random.default_rng(5)
    decays = tf.constant(rng.uniform(0.5, 1, (4, 20, 3)))
    impulses = tf.constant(rng.standard_normal((4, 20, 3)))

    def each(pair):
        return cuscan.linear_recurrence(pair[0], pair[1])

    whole = cuscan.linear_recurrence(decays, impulses, axis=1)
    np.testing.assert_allclose(tf.vectorized_map(each, (decays, impulses)), whole, rtol=1e-12)

    def gradients(mapped):
        with tf.GradientTape() as tape:
            tape.watch(decays)
            loss = tf.reduce_sum(mapped() ** 2)
        return tape.gradient(loss, decays)

    expected = gradients(lambda: cuscan.linear_recurrence(decays, impulses, axis=1))
    for run in (lambda f: f(), lambda f: tf.function(f)()):
        mapped = run(lambda: gradients(lambda: tf.map_fn(each, (decays, impulses),
                                                         fn_output_signature=tf.float64)))
        np.testing.assert_allclose(mapped, expected, rtol=1e-12)


def test_vjp_function():
    rng = np.random.default_rng(5)
    decays, impulses, grad = (tf.constant(rng.standard_normal((20, 4))) for _ in range(3))
    state = tf.constant(rng.standard_normal(4))
    h = cuscan.linear_recurrence(decays, impulses, state)
    with tf.GradientTape() as tape:
        tape.watch([decays, impulses, state])
        output = scan(decays, impulses, state)
    expected = tape.gradient(output, [decays, impulses, state], output_gradients=grad)
    ours = cuscan.linear_recurrence_vjp(grad, decays, h, state)
    for mine, theirs in zip(ours, expected, strict=True):
        np.testing.assert_allclose(mine.numpy(), theirs.numpy(), rtol=1e-10)
    assert cuscan.linear_recurrence_vjp(grad, decays, h)[2] is None


def test_errors():
    with pytest.raises(ValueError, match="do not broadcast"):
        cuscan.linear_recurrence(tf.ones(3), tf.ones(4))
    with pytest.raises(ValueError, match="initial_state"):
        tf.function(lambda x: cuscan.linear_recurrence(0.5, x, tf.ones(3)))(tf.ones((3, 2)))
    with pytest.raises(TypeError, match="`impulses` has dtype string, which cuscan does not"):
        cuscan.linear_recurrence(0.5, tf.constant(["a", "b"]))
    with pytest.raises(TypeError, match="`impulses` is a SparseTensor"):
        cuscan.linear_recurrence(0.5, tf.sparse.from_dense(tf.eye(3)))
    with pytest.raises(TypeError, match="`decays` is a RaggedTensor"):
        cuscan.linear_recurrence(tf.ragged.constant([[1.0], [2.0, 3.0]]), 1.0)


@pytest.mark.parametrize("length", [0, 1, 2, 17, 1000])
@pytest.mark.parametrize("signature", ["static", "dynamic"])
def test_xla_compilation(length, signature):
    """Under XLA (``jit_compile=True``), which cannot call back into Python, the recurrence
    runs in TensorFlow's own operations: values of every dtype and layout, gradients and
    second derivatives as cuscan's own, over lengths known or unknown when tracing."""
    rng = np.random.default_rng(length)
    decays, impulses, state = (tf.constant(v) for v in _operands(rng, length, tf.complex128))
    def forward(a, x, s):
        return [cuscan.linear_recurrence(a, x, s, reverse=reverse)
                for reverse in (False, True)] + [
            cuscan.linear_recurrence(tf.transpose(x, (1, 2, 0)), 0.5, axis=-1)]

    def gradients(a, x, s):
        with tf.GradientTape() as outer:
            outer.watch(a)
            with tf.GradientTape() as inner:
                inner.watch([a, x, s])
                loss = sum(tf.reduce_sum(tf.abs(h) ** 2) for h in forward(a, x, s))
            first = inner.gradient(loss, [a, x, s])
        return [*first, outer.gradient(tf.reduce_sum(tf.abs(first[0]) ** 2), a)]

    for dtype in DTYPES:
        operands = [tf.cast(v if dtype.is_complex else tf.math.real(v), dtype)
                    for v in (decays, impulses, state)]

        for function in (forward, gradients):
            if function is gradients and dtype not in (tf.float64, tf.complex128):
                continue
            if signature == "static":
                compiled = tf.function(function, jit_compile=True)
            else:
                compiled = tf.function(function, jit_compile=True, input_signature=[
                    tf.TensorSpec([None] * v.shape.rank, v.dtype) for v in operands])
            tolerance = {tf.float16: 1e-2, tf.bfloat16: 5e-2, tf.float32: 1e-5,
                         tf.complex64: 1e-5}.get(dtype, 1e-10)
            for mine, theirs in zip(compiled(*operands), function(*operands), strict=True):
                if theirs is None:  # no steps: nothing connects a derivative to the decays
                    assert mine is None
                    continue
                assert mine.dtype == theirs.dtype
                assert mine.shape == theirs.shape
                wide = np.complex128 if dtype.is_complex else np.float64
                np.testing.assert_allclose(_numpy(mine, wide), _numpy(theirs, wide),
                                           rtol=tolerance, atol=tolerance, err_msg=str(dtype))


@pytest.mark.parametrize("dtype", ["float32", "complex64"])
def test_xla_single_precision_decays_near_one(dtype):
    """Under XLA, over 2^18 steps of decays of modulus 1 (complex rotations) or 1 - 10^-5 in
    single precision, the recurrence and its gradient stay within ``eps * sqrt(T)`` of the
    result's RMS, as the serial loop's rounding does: Hillis and Steele's products of the
    decays are in double precision. Squared in single precision, the product over 2^k steps
    compounded 2^k roundings, 70 times that bound for the rotations."""
    decays, impulses, bound = decays_near_one(dtype, 2**18)

    @tf.function(jit_compile=True)
    def run(a, x):
        h = cuscan.linear_recurrence(a, x)
        return h, cuscan.linear_recurrence_vjp(x, a, h)[1]

    h, grad = run(tf.constant(decays), tf.constant(impulses))
    for result, reverse in ((h, False), (grad, True)):  # the gradient: conj(decays) backwards
        expected = reference.linear_recurrence(np.conj(decays) if reverse else decays, impulses,
                                               reverse=reverse)
        assert reference.relative_error(result.numpy(), expected) <= bound


def test_xla_vjp_signal_and_keras():
    """The VJP function and cuscan.signal under XLA; a Keras model compiled with XLA (Keras'
    default on a GPU) trains as without."""
    x = tf.constant(np.random.default_rng(0).standard_normal((60, 2)))
    calls = {
        "vjp": lambda x: cuscan.linear_recurrence_vjp(x, 0.5, x, x[0])[1:],
        "lfilter": lambda x: cuscan.signal.lfilter([1.0, 0.5], [1.0, -0.5, 0.25], x, axis=0),
        "filtfilt": lambda x: cuscan.signal.filtfilt([1.0, 0.5], [1.0, -0.5], x, axis=0),
        "ema": lambda x: cuscan.signal.ema(x, 0.3, axis=0, adjust=True),
    }
    for name, call in calls.items():
        for mine, theirs in zip(tf.nest.flatten(tf.function(call, jit_compile=True)(x)),
                                tf.nest.flatten(call(x)), strict=True):
            np.testing.assert_allclose(mine.numpy(), theirs.numpy(), rtol=1e-12, atol=1e-12,
                                       err_msg=name)

    keras = tf.keras
    inputs = keras.Input((None, 2))
    decay = keras.layers.Dense(2, activation="sigmoid")
    outputs = keras.layers.Lambda(lambda v: cuscan.linear_recurrence(v[0], v[1], axis=1))(
        [decay(inputs), inputs])
    model = keras.Model(inputs, keras.layers.Dense(1)(outputs[:, -1]))
    data = np.random.default_rng(1).standard_normal((8, 6, 2)).astype(np.float32)
    weights = model.get_weights()
    losses = {}
    for jit_compile in (True, False):
        model.set_weights(weights)
        model.compile(keras.optimizers.SGD(0.01), "mse", jit_compile=jit_compile)
        history = model.fit(data, data.sum((1, 2))[:, None], epochs=3, batch_size=8,
                            verbose=0, shuffle=False)
        losses[jit_compile] = history.history["loss"]
    np.testing.assert_allclose(losses[True], losses[False], rtol=1e-4)


def test_saved_models_run_in_a_fresh_process(tmp_path):
    """A SavedModel (``tf.saved_model.save``, Keras' ``model.export``) keeps no Python, so its
    functions are saved with the recurrence in TensorFlow's own operations, and serve in a
    process that has never imported cuscan, whatever length comes."""
    class Module(tf.Module):
        def __init__(self):
            self.decays = tf.Variable(tf.fill([3], tf.constant(0.8, tf.float64)))

        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float64)])
        def __call__(self, x):
            return cuscan.linear_recurrence(self.decays, x, reverse=True)

    module = Module()
    x = np.random.default_rng(0).standard_normal((30, 3))
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "expected.npy", module(tf.constant(x)).numpy())  # traced before saving
    tf.saved_model.save(module, str(tmp_path / "module"))

    keras = tf.keras
    inputs = keras.Input((None, 3))
    model = keras.Model(inputs, keras.layers.Lambda(
        lambda v: cuscan.linear_recurrence(0.5, v, axis=1))(inputs))
    model.export(str(tmp_path / "model"), format="tf_saved_model", verbose=False)
    np.save(tmp_path / "expected_model.npy", model(x[None].astype(np.float32)).numpy())

    run_in_fresh_process("""
        import os, sys, numpy as np, tensorflow as tf
        directory = os.environ["OUTPUT_DIRECTORY"]
        x = np.load(os.path.join(directory, "x.npy"))
        module = tf.saved_model.load(os.path.join(directory, "module"))
        np.testing.assert_allclose(module(x).numpy(),
                                   np.load(os.path.join(directory, "expected.npy")), rtol=1e-12)
        model = tf.saved_model.load(os.path.join(directory, "model"))
        np.testing.assert_allclose(model.serve(x[None].astype(np.float32)).numpy(),
                                   np.load(os.path.join(directory, "expected_model.npy")),
                                   rtol=1e-5, atol=1e-6)
        assert "cuscan" not in sys.modules
    """, OUTPUT_DIRECTORY=str(tmp_path), TF_CPP_MIN_LOG_LEVEL="3")


def test_operands_on_different_devices():
    """Tensors on different devices (two logical CPUs, in a fresh process) are viewed on
    one, as TensorFlow's own operations copy operands, for the forward and the gradient."""
    script = """
        import numpy as np, tensorflow as tf
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
        import cuscan
        from cuscan import _tensorflow
        devices = []
        to_array = _tensorflow.to_array
        _tensorflow.to_array = lambda t: devices.append(t.device) or to_array(t)
        with tf.device("CPU:1"):
            impulses = tf.ones((4, 3), tf.float64)
        with tf.device("CPU:0"):
            decays = tf.fill((3,), tf.constant(0.5, tf.float64))
        assert decays.device != impulses.device
        with tf.GradientTape() as tape:
            tape.watch(decays)
            h = cuscan.linear_recurrence(decays, impulses, 1.0)
        grad = tape.gradient(h, decays)
        assert len(set(devices)) == 1, devices
        expected = cuscan.linear_recurrence(np.full(3, 0.5), np.ones((4, 3)), 1.0)
        np.testing.assert_allclose(h.numpy(), expected)
        np.testing.assert_allclose(grad.numpy(), cuscan.linear_recurrence_vjp(
            np.ones((4, 3)), np.full(3, 0.5), expected, 1.0)[0])
    """
    run_in_fresh_process(script, TF_CPP_MIN_LOG_LEVEL="3")
