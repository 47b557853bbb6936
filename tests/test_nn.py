"""The layers of cuscan.nn: their equations, both methods, shapes, states and gradients."""

from __future__ import annotations

import inspect
import math
import re

import numpy as np
import pytest

from tests.conftest import require

torch = require("torch")
from cuscan.nn import GILR, GILRLSTM, QRNN, SRU, _layers  # noqa: E402  (needs torch)


def loop_reference(model, x, state=None):
    """The layers' equations stepped one time step at a time in plain torch (time-major)."""
    finals = []
    for index, layer in enumerate(model.layers):
        x, final = _loop_layer(layer, x, layer_state(model, state, index))
        finals.append(final)
    return x, stacked(model, finals)


def layer_state(model, state, index):
    """Layer ``index``'s part of a stack's state, as ``_loop_layer`` takes it."""
    if state is None:
        return None
    if isinstance(model, QRNN):
        return state[0][index], state[1][index]
    return tuple(s[index] for s in state) if isinstance(state, tuple) else state[index]


def stacked(model, finals):
    """A stack's state from its layers' (the inverse of ``layer_state``)."""
    if isinstance(model, QRNN):
        return torch.stack([c for c, _ in finals]), tuple(last for _, last in finals)
    if isinstance(finals[0], tuple):
        return tuple(torch.stack(parts) for parts in zip(*finals, strict=True))
    return torch.stack(finals)


def _loop_layer(layer, x, state):
    steps, batch = x.shape[:2]
    hidden = layer.recurrent.in_features if isinstance(layer, _layers._GILRLSTMLayer) else (
        layer.linear.out_features // 2 if isinstance(layer, _layers._GILRLayer) else
        layer.linear.out_features // 3 if isinstance(layer, _layers._SRULayer) else
        layer.conv.out_channels // 3)
    zeros = x.new_zeros(batch, hidden)
    outputs = []
    if isinstance(layer, _layers._GILRLayer):
        h = zeros if state is None else state
        for t in range(steps):
            g, i = layer.linear(x[t]).chunk(2, dim=-1)
            g = torch.sigmoid(g)
            h = g * h + (1 - g) * torch.tanh(i)
            outputs.append(h)
        return torch.stack(outputs), h
    if isinstance(layer, _layers._GILRLSTMLayer):
        surrogate, c = (zeros, zeros) if state is None else state
        for t in range(steps):
            g, j = layer.surrogate.linear(x[t]).chunk(2, dim=-1)
            g = torch.sigmoid(g)
            pre = layer.inputs(x[t]) + surrogate @ layer.recurrent.weight.T
            f, i, o, z = pre.chunk(4, dim=-1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(z)
            outputs.append(torch.sigmoid(o) * c)
            surrogate = g * surrogate + (1 - g) * torch.tanh(j)  # h~_t, read at t + 1
        return torch.stack(outputs), (surrogate, c)
    if isinstance(layer, _layers._SRULayer):
        c = zeros if state is None else state
        for t in range(steps):
            candidate, f, r = layer.linear(x[t]).chunk(3, dim=-1)  # W x, W_f x, W_r x
            b_f, b_r = (zeros.new_zeros(2 * hidden) if layer.bias is None
                        else layer.bias).chunk(2)
            f, r = torch.sigmoid(f + b_f), torch.sigmoid(r + b_r)
            c = f * c + (1 - f) * candidate
            outputs.append(r * torch.tanh(c) + (1 - r) * layer.highway(x[t]))
        return torch.stack(outputs), c
    c, before = (zeros, None) if state is None else state
    weight, bias = layer.conv.weight, layer.conv.bias  # (3H, m, k)
    for t in range(steps):
        pre = x.new_zeros(batch, 3 * hidden) if bias is None else bias.expand(batch, -1).clone()
        for k in range(layer.window):  # tap k reads x[t - (window - 1) + k]
            source = t - (layer.window - 1) + k
            if source >= 0:
                pre = pre + x[source] @ weight[:, :, k].T
            elif before is not None:  # the given inputs before the start, in time order
                pre = pre + before[source + layer.window - 1] @ weight[:, :, k].T
        z, f, o = pre.chunk(3, dim=-1)
        f = torch.sigmoid(f)
        c = f * c + (1 - f) * torch.tanh(z)
        outputs.append(torch.sigmoid(o) * c)
    before = x.new_zeros(layer.window - 1, *x.shape[1:]) if before is None else before
    return torch.stack(outputs), (c, torch.cat([before, x])[steps:])


MODELS = {
    "gilr": lambda m, h, **kw: GILR(m, h, **kw),
    "gilr-lstm": lambda m, h, **kw: GILRLSTM(m, h, **kw),
    "sru": lambda m, h, **kw: SRU(m, h, **kw),
    "sru-square": lambda m, h, **kw: SRU(h, h, **kw),
    "qrnn-1": lambda m, h, **kw: QRNN(m, h, window=1, **kw),
    "qrnn-2": lambda m, h, **kw: QRNN(m, h, window=2, **kw),
    "qrnn-10": lambda m, h, **kw: QRNN(m, h, window=10, **kw),
}


def make(name, method="auto", num_layers=2, batch_first=False, inputs=3, hidden=5, **options):
    torch.manual_seed(0)
    model = MODELS[name](inputs, hidden, num_layers=num_layers, batch_first=batch_first,
                         method=method, **options).double()
    return model, model.input_size


def random_state(model, batch, generator):
    shape = (len(model.layers), batch, model.hidden_size)
    if isinstance(model, QRNN):
        return torch.randn(shape, generator=generator, dtype=torch.float64), tuple(
            torch.randn(model.window - 1, batch, layer.conv.in_channels, generator=generator,
                        dtype=torch.float64) for layer in model.layers)
    parts = tuple(torch.randn(shape, generator=generator, dtype=torch.float64)
                  for _ in model.state_names)
    return parts[0] if len(parts) == 1 else parts


def flat(state):
    """The tensors of a state, in order."""
    if isinstance(state, torch.Tensor):
        return [state]
    return [tensor for part in state for tensor in flat(part)]


def unflat(like, tensors):
    """``tensors`` (consumed from an iterator) in the structure of the state ``like``."""
    if isinstance(like, torch.Tensor):
        return next(tensors)
    return tuple(unflat(part, tensors) for part in like)


def each(state, change):
    """``change`` applied to every tensor of a state, its structure kept."""
    return unflat(state, iter([change(tensor) for tensor in flat(state)]))


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("method", ["serial", "parallel"])
@pytest.mark.parametrize("bias", [True, False])
def test_matches_the_equations(name, method, bias):
    model, inputs = make(name, method, bias=bias)
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(300, 4, inputs, generator=generator, dtype=torch.float64)
    state = random_state(model, 4, generator)
    output, final = model(x, state)
    expected, expected_final = loop_reference(model, x, state)
    torch.testing.assert_close(output, expected, rtol=1e-10, atol=1e-10)
    for mine, theirs in zip(flat(final), flat(expected_final), strict=True):
        torch.testing.assert_close(mine, theirs, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_methods_agree_in_value_and_gradient(name):
    generator = torch.Generator().manual_seed(2)
    results = []
    for method in ("serial", "parallel"):
        model, inputs = make(name, method, hidden=16)
        x = torch.randn(1000, 3, inputs, generator=torch.Generator().manual_seed(3),
                        dtype=torch.float64, requires_grad=True)
        output, final = model(x)
        loss = (output * torch.randn(output.shape, generator=generator.manual_seed(4),
                                     dtype=torch.float64)).sum() + sum(s.sum() for s in flat(final))
        loss.backward()
        results.append([output, x.grad, *(p.grad for p in model.parameters())])
    for serial, parallel in zip(*results, strict=True):
        torch.testing.assert_close(parallel, serial, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_shapes_batch_first_and_states(name):
    model, inputs = make(name, batch_first=True, num_layers=3)
    x = torch.randn(2, 17, inputs, dtype=torch.float64)
    output, final = model(x)
    assert output.shape == (2, 17, model.hidden_size)
    like = random_state(model, 2, torch.Generator().manual_seed(5))
    assert [s.shape for s in flat(final)] == [s.shape for s in flat(like)]
    time_major, _ = make(name, batch_first=False, num_layers=3)
    expected, expected_final = time_major(x.transpose(0, 1))
    torch.testing.assert_close(output, expected.transpose(0, 1))
    for mine, theirs in zip(flat(final), flat(expected_final), strict=True):
        torch.testing.assert_close(mine, theirs)
    # An empty sequence returns the initial state, and differentiates as a function of the
    # weights with zero gradients (as torch.nn.Linear on no rows does).
    state = random_state(model, 2, torch.Generator().manual_seed(5))
    for tensor in flat(state):
        tensor.requires_grad_()
    output, final = model(x[:, :0], state)
    assert output.shape == (2, 0, model.hidden_size)
    for mine, given in zip(flat(final), flat(state), strict=True):
        torch.testing.assert_close(mine, given)
    for mine, given in zip(flat(model(x[:, :0])[1]), flat(state), strict=True):
        torch.testing.assert_close(mine, torch.zeros_like(given))  # zeros without a state
    model.zero_grad(set_to_none=True)
    (output.sum() + sum(tensor.sum() for tensor in flat(final))).backward()
    for parameter in model.parameters():
        torch.testing.assert_close(parameter.grad, torch.zeros_like(parameter))
    for tensor in flat(state):
        torch.testing.assert_close(tensor.grad, torch.ones_like(tensor))


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("batch_first", [False, True])
def test_state_carries_across_blocks(name, batch_first):
    """Run in blocks, the final state of each starting the next: the same as one run, in
    value and gradient, for blocks shorter than a QRNN's window too (its state carries
    the inputs its next steps read)."""
    model, inputs = make(name, batch_first=batch_first)
    x = torch.randn(120, 3, inputs, dtype=torch.float64, requires_grad=True)
    seen = x.transpose(0, 1) if batch_first else x
    whole, final = model(seen)
    outputs, state = [], None
    for start, stop in [(0, 50), (50, 53), (53, 54), (54, 54), (54, 120)]:
        output, state = model(seen[:, start:stop] if batch_first else seen[start:stop], state)
        outputs.append(output)
    blocks = torch.cat(outputs, dim=1 if batch_first else 0)
    torch.testing.assert_close(blocks, whole)
    for mine, theirs in zip(flat(state), flat(final), strict=True):
        torch.testing.assert_close(mine, theirs)
    weights = torch.randn(whole.shape, dtype=torch.float64)
    expected = torch.autograd.grad((whole * weights).sum(), [x, *model.parameters()])
    grads = torch.autograd.grad((blocks * weights).sum(), [x, *model.parameters()])
    for mine, theirs in zip(grads, expected, strict=True):
        torch.testing.assert_close(mine, theirs)


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("bias", [True, False])
def test_gradcheck(name, bias):
    model, inputs = make(name, "parallel", hidden=2, bias=bias)
    x = torch.randn(6, 2, inputs, dtype=torch.float64, requires_grad=True)
    like = random_state(model, 2, torch.Generator().manual_seed(6))
    state = [s.requires_grad_() for s in flat(like)]

    def function(x, *state):
        output, final = model(x, unflat(like, iter(state)))
        return output, *flat(final)

    assert torch.autograd.gradcheck(function, (x, *state))


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize(("enforce_sorted", "bidirectional"),
                         [(True, False), (False, False), (False, True)])
def test_packed_sequences(name, enforce_sorted, bidirectional):
    """A PackedSequence gives, for each sequence, what running it alone gives: its
    outputs and its state after its own last step, in value and gradient (backward
    directions start at each sequence's own end)."""
    # batch_first does not apply to packed input
    model, inputs = make(name, batch_first=True, bidirectional=bidirectional)
    generator = torch.Generator().manual_seed(7)
    # a batch of 6 and 5 features: neither size stands in for the other
    lengths = [9, 4, 13, 1, 9, 6] if not enforce_sorted else [13, 9, 9, 6, 4, 1]
    sequences = [torch.randn(n, inputs, generator=generator, dtype=torch.float64,
                             requires_grad=True) for n in lengths]
    state = random_state(model, len(lengths), generator)
    packed = torch.nn.utils.rnn.pack_sequence(sequences, enforce_sorted=enforce_sorted)
    output, final = model(packed, state)
    assert isinstance(output, torch.nn.utils.rnn.PackedSequence)
    torch.testing.assert_close(output.batch_sizes, packed.batch_sizes)
    padded, got_lengths = torch.nn.utils.rnn.pad_packed_sequence(output, batch_first=True)
    assert got_lengths.tolist() == lengths
    weights = torch.randn(padded.shape, generator=generator, dtype=torch.float64)
    loss = (padded * weights).sum() + sum((s * s).sum() for s in flat(final))
    grads = torch.autograd.grad(loss, [*sequences, *model.parameters()])

    alone_loss = 0
    for index, (sequence, length) in enumerate(zip(sequences, lengths, strict=True)):
        alone, alone_final = model(sequence, each(state, lambda s, i=index: s[:, i]))
        torch.testing.assert_close(padded[index, :length], alone)
        for mine, theirs in zip(flat(final), flat(alone_final), strict=True):
            torch.testing.assert_close(mine[:, index], theirs)
        alone_loss = alone_loss + (alone * weights[index, :length]).sum() + sum(
            (s * s).sum() for s in flat(alone_final))
    expected = torch.autograd.grad(alone_loss, [*sequences, *model.parameters()])
    for mine, theirs in zip(grads, expected, strict=True):
        torch.testing.assert_close(mine, theirs)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_unbatched_sequence(name):
    """``(T, input_size)`` with a ``(num_layers, hidden_size)`` state, as torch.nn.LSTM takes."""
    model, inputs = make(name, batch_first=True)
    generator = torch.Generator().manual_seed(8)
    x = torch.randn(11, inputs, generator=generator, dtype=torch.float64)
    state = random_state(model, 1, generator)
    output, final = model(x, each(state, lambda s: s[:, 0]))
    expected, expected_final = model(x[None], state)
    torch.testing.assert_close(output, expected[0])
    for mine, theirs in zip(flat(final), flat(expected_final), strict=True):
        assert mine.shape == theirs[:, 0].shape
        torch.testing.assert_close(mine, theirs[:, 0])


@pytest.mark.parametrize("name", sorted(MODELS))
def test_bidirectional_matches_the_equations(name):
    """Each layer's second direction is its equations run over the reversed sequence;
    the next layer reads both directions' outputs, concatenated; states are ordered
    (layer, direction) as in torch.nn.LSTM. Batched and unbatched."""
    model, inputs = make(name, bidirectional=True)
    assert len(model.layers) == 4
    generator = torch.Generator().manual_seed(17)
    x = torch.randn(40, 3, inputs, generator=generator, dtype=torch.float64)
    state = random_state(model, 3, generator)
    output, final = model(x, state)
    assert output.shape == (40, 3, 2 * model.hidden_size)
    expected, finals = x, []
    for index, layer in enumerate(model.layers):
        own = layer_state(model, state, index)
        if index % 2 == 0:
            forward, end = _loop_layer(layer, expected, own)
        else:
            if isinstance(model, QRNN):  # the given inputs after the end, in time order
                own = own[0], own[1].flip(0)
            backward, start = _loop_layer(layer, expected.flip(0), own)
            if isinstance(model, QRNN):  # the first inputs, in time order
                start = start[0], start[1].flip(0)
            expected = torch.cat([forward, backward.flip(0)], dim=-1)
            finals += [end, start]
    torch.testing.assert_close(output, expected, rtol=1e-10, atol=1e-10)
    for mine, theirs in zip(flat(final), flat(stacked(model, finals)), strict=True):
        torch.testing.assert_close(mine, theirs, rtol=1e-10, atol=1e-10)
    single, single_final = model(x[:, 1], each(state, lambda s: s[:, 1]))
    torch.testing.assert_close(single, output[:, 1])
    for mine, theirs in zip(flat(single_final), flat(final), strict=True):
        torch.testing.assert_close(mine, theirs[:, 1])


def test_dropout_between_layers():
    """Dropout acts on the outputs of every layer but the last, in training only: with
    p = 1 the last layer reads zeros, and a single layer is unchanged."""
    model, inputs = make("gilr-lstm", dropout=1.0)
    plain, _ = make("gilr-lstm")
    x = torch.randn(30, 2, inputs, dtype=torch.float64)
    model.eval()
    torch.testing.assert_close(model(x)[0], plain(x)[0])
    model.train()
    output, _ = model(x)
    expected, _ = _loop_layer(model.layers[1], torch.zeros(30, 2, model.hidden_size,
                                                            dtype=torch.float64), None)
    torch.testing.assert_close(output, expected)
    single, _ = make("gilr-lstm", dropout=1.0, num_layers=1)  # neither inputs nor outputs
    torch.testing.assert_close(single(x)[0], make("gilr-lstm", num_layers=1)[0](x)[0])
    model, _ = make("sru", dropout=0.5, num_layers=3)
    torch.manual_seed(18)
    first = model(x)[0]
    torch.manual_seed(18)
    torch.testing.assert_close(model(x)[0], first)
    assert not torch.allclose(model(x)[0], first)
    assert "dropout=0.5" in repr(model)


def test_qrnn_state_of_c_alone():
    """A QRNN's state given as c alone takes zeros for the inputs before the first step;
    the filter is two steps wide unless given."""
    generator = torch.Generator().manual_seed(21)
    model = QRNN(3, 4, num_layers=2, window=3).double()
    x = torch.randn(7, 5, 3, generator=generator, dtype=torch.float64)
    c = torch.randn(2, 5, 4, generator=generator, dtype=torch.float64)
    zeros = tuple(torch.zeros(2, 5, n, dtype=torch.float64) for n in (3, 4))
    for mine, theirs in zip(flat(model(x, c)), flat(model(x, (c, zeros))), strict=True):
        torch.testing.assert_close(mine, theirs)
    unbatched = model(x[:, 0], c[:, 0]), model(x[:, 0], (c[:, 0], [z[:, 0] for z in zeros]))
    for mine, theirs in zip(*map(flat, unbatched), strict=True):
        torch.testing.assert_close(mine, theirs)
    assert QRNN(3, 4).window == 2
    assert "method='auto', window=2\n" in repr(QRNN(3, 4))


@pytest.mark.parametrize("name", sorted(MODELS))
def test_without_biases(name):
    """``bias=False``, as ``torch.nn.LSTM``'s: the same weights and no bias anywhere;
    made on the meta device and reset, it is made as directly."""
    biased = MODELS[name](3, 4, num_layers=2, bidirectional=True)
    model = MODELS[name](3, 4, num_layers=2, bidirectional=True, bias=False)
    assert model.bias is False
    assert biased.bias is True
    assert "bias=False" in repr(model)
    assert "bias" not in repr(biased).split("\n")[1]
    weights = {key: p.shape for key, p in model.named_parameters()}
    assert weights == {key: p.shape for key, p in biased.named_parameters()
                       if not key.endswith("bias")}
    torch.manual_seed(6)
    direct = MODELS[name](3, 4, num_layers=2, bias=False)
    meta = MODELS[name](3, 4, num_layers=2, bias=False, device="meta").to_empty(device="cpu")
    torch.manual_seed(6)
    meta.reset_parameters()
    x = torch.randn(7, 2, direct.input_size)
    torch.testing.assert_close(meta(x)[0], direct(x)[0], rtol=0, atol=0)


def test_sru_biases_drawn_as_linear_draws_its_own():
    """Within +-1/sqrt(fan_in), over most of it (512 draws a layer)."""
    torch.manual_seed(3)
    for layer in SRU(16, 256, num_layers=2).layers:
        bound = 1 / math.sqrt(layer.input_size)
        assert 0.9 * bound < layer.bias.abs().max() <= bound


def test_errors():
    model = GILR(3, 4)
    with pytest.raises(ValueError, match=r"\(T, B, input_size\) or \(T, input_size\) with "
                       r"input_size 3, or a PackedSequence; got shape \(5, 2, 4\)"):
        model(torch.randn(5, 2, 4))
    with pytest.raises(ValueError, match=r"got shape \(5, 4\)"):
        model(torch.randn(5, 4))
    with pytest.raises(ValueError, match=r"\(B, T, input_size\)"):
        GILR(3, 4, batch_first=True)(torch.randn(5, 2))
    with pytest.raises(ValueError, match=r"shape \(1, 2, 4\)"):
        model(torch.randn(5, 2, 3), torch.zeros(2, 2, 4))
    with pytest.raises(ValueError, match=r"shape \(1, 4\); got \(1, 2, 4\)"):
        model(torch.randn(5, 3), torch.zeros(1, 2, 4))  # unbatched inputs, batched state
    with pytest.raises(ValueError, match=r"\('surrogate', 'cell'\)"):
        GILRLSTM(3, 4)(torch.randn(5, 2, 3), torch.zeros(1, 2, 4))
    with pytest.raises(ValueError, match=r"1 tensor\(s\) \('c',\) of shape \(1, 2, 4\)"):
        SRU(3, 4)(torch.randn(5, 2, 3), torch.zeros(2, 2, 4))  # an SRU's state is c
    with pytest.raises(ValueError, match="method"):
        SRU(3, 4, method="fast")
    with pytest.raises(ValueError, match="`window` must be at least 1; got 0"):
        QRNN(3, 4, window=0)
    with pytest.raises(ValueError, match="`num_layers` must be at least 1; got 0"):
        QRNN(3, 4, num_layers=0)
    with pytest.raises(ValueError, match="`hidden_size` must be at least 1; got 0"):
        GILR(3, 0)
    with pytest.raises(ValueError, match="`input_size` must be at least 1; got -2"):
        SRU(-2, 4)
    with pytest.raises(TypeError, match="`num_layers` must be an integer; got float"):
        GILRLSTM(3, 4, num_layers=1.5)
    with pytest.raises(TypeError, match="`window` must be an integer; got bool"):
        QRNN(3, 4, window=True)
    with pytest.raises(ValueError, match=r"`dropout` must be a number in \[0, 1\]; got 1.5"):
        GILR(3, 4, dropout=1.5)
    for flag, value, shown in (("batch_first", "yes", "'yes'"), ("batch_first", None, "None"),
                               ("bidirectional", 2, "2"), ("bidirectional", (1,), "tuple")):
        with pytest.raises(TypeError, match=rf"^`{flag}` must be a bool; got {shown}$"):
            SRU(3, 4, **{flag: value})
    flags = GILRLSTM(3, 4, batch_first=np.bool_(True), bidirectional=0)
    assert flags.batch_first is True
    assert flags.bidirectional is False
    with pytest.raises(ValueError, match=r"shape \(2, 2, 4\)"):
        QRNN(3, 4, bidirectional=True)(torch.randn(5, 2, 3), torch.zeros(1, 2, 4))
    qrnn, x, c = QRNN(3, 4, num_layers=2, window=3), torch.randn(7, 5, 3), torch.zeros(2, 5, 4)
    with pytest.raises(ValueError, match=(
            r"expected the state as c of shape \(2, 5, 4\), or the pair \(c, inputs\) with "
            r"inputs 2 tensor\(s\) of shapes \[\(2, 5, 3\), \(2, 5, 4\)\]; "
            r"got \[\(2, 5, 4\), \[\(2, 5, 3\)\]\]")):
        qrnn(x, (c, [torch.zeros(2, 5, 3)]))
    with pytest.raises(ValueError, match=r"got \[\(2, 5, 4\), \[\(2, 5, 3\), \(1, 5, 4\)\]\]"):
        qrnn(x, (c, [torch.zeros(2, 5, 3), torch.zeros(1, 5, 4)]))
    with pytest.raises(ValueError, match=r"c of shape \(2, 4\), .* shapes \[\(2, 3\), "
                       r"\(2, 4\)\]; got \[\(2, 5, 4\), NoneType, NoneType\]"):
        qrnn(x[:, 0], (c, None, None))
    with pytest.raises(ValueError, match=r"got str"):
        GILRLSTM(3, 4)(x, "state")
    with pytest.raises(TypeError, match=r"got an unexpected keyword argument 'window'"):
        GILR(3, 4, window=2)
    with pytest.raises(TypeError, match=r"^`bias` must be a bool; got 'no'$"):
        SRU(3, 4, bias="no")
    with pytest.raises(TypeError, match=r"a Tensor or a PackedSequence; got ndarray"):
        model(torch.randn(5, 2, 3).numpy())
    with pytest.raises(ValueError, match=(
            r"^expected inputs in the parameters' dtype, torch.float32 \(any floating dtype "
            r"under torch.autocast\); got torch.float64: convert with .to\(torch.float32\), "
            r"or the model with .to\(torch.float64\)$")):
        model(torch.randn(5, 2, 3, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"got torch.int64: convert with .to\(torch.float32\)$"):
        model(torch.ones(5, 2, 3, dtype=torch.int64))
    with pytest.raises(ValueError, match=r"^expected the state in the parameters' dtype, "
                       r"torch.float32 .*; got torch.float16"):
        GILRLSTM(3, 4)(x[..., :3], (torch.zeros(1, 5, 4), torch.zeros(1, 5, 4).half()))
    with pytest.raises(ValueError, match=r"^expected the state in .*; got torch.float64"):
        qrnn(x, (c, [torch.zeros(2, 5, 3), torch.zeros(2, 5, 4, dtype=torch.float64)]))
    packed = torch.nn.utils.rnn.pack_sequence([torch.randn(4, 3, dtype=torch.float64)])
    with pytest.raises(ValueError, match=r"^expected inputs in .*; got torch.float64"):
        model(packed)
    with pytest.raises(ValueError, match=r"^expected inputs on the parameters' device, meta; "
                       r"got a tensor on cpu$"):
        GILR(3, 4, device="meta")(torch.randn(5, 2, 3))
    with pytest.raises(ValueError, match=r"^expected the state on the parameters' device, cpu; "
                       r"got a tensor on meta$"):
        model(torch.randn(5, 2, 3), torch.zeros(1, 2, 4, device="meta"))


@pytest.mark.parametrize("name", sorted(MODELS))
def test_device_and_dtype(name):
    """``device`` and ``dtype`` make the parameters as torch.nn modules make theirs: in that
    dtype, and on the meta device without memory (shapes only)."""
    model = MODELS[name](3, 5, num_layers=2, bidirectional=True, dtype=torch.float64)
    assert {p.dtype for p in model.parameters()} == {torch.float64}
    x = torch.randn(6, 2, model.input_size, dtype=torch.float64)
    assert model(x)[0].dtype == torch.float64
    meta = MODELS[name](3, 5, num_layers=2, device="meta")
    assert {p.device.type for p in meta.parameters()} == {"meta"}
    output, _ = meta(torch.empty(x.shape, device="meta"))
    assert output.shape == (6, 2, 5)
    assert output.device.type == "meta"


@pytest.mark.parametrize("name", sorted(MODELS))
def test_autocast(name):
    """Under ``torch.autocast`` float32 parameters take float32 inputs (and a state in
    bfloat16 or float32): both methods give the same outputs, within bfloat16's rounding of
    those without autocast, and float32 gradients."""
    torch.manual_seed(0)
    model = MODELS[name](3, 5, num_layers=2, bidirectional=True)
    x = torch.randn(40, 2, model.input_size)
    _, state = model(x)
    expected, _ = model(x, state)  # the float32 run from that state
    results = {}
    for method in ("serial", "parallel"):
        model.method = method
        with torch.autocast("cpu", dtype=torch.bfloat16):
            results[method] = [model(x, each(state, lambda t, dtype=dtype: t.detach().to(dtype)))[0]
                               for dtype in (torch.bfloat16, torch.float32)]
        grads = torch.autograd.grad(sum(r.float().square().sum() for r in results[method]),
                                    list(model.parameters()))
        assert {g.dtype for g in grads} == {torch.float32}
    epsilon = torch.finfo(torch.bfloat16).eps
    for serial, parallel in zip(results["serial"], results["parallel"], strict=True):
        assert parallel.dtype in (torch.bfloat16, torch.float32)
        torch.testing.assert_close(serial, parallel)
        torch.testing.assert_close(parallel.float(), expected,
                                   rtol=16 * epsilon, atol=16 * epsilon)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_ensemble_through_torch_func(name):
    """Models stacked by ``torch.func.stack_module_state`` and run by ``vmap`` over
    ``functional_call`` (an ensemble): the gradients of ``grad`` over that ``vmap`` are
    each model's own."""
    models = [make(name, bidirectional=True)[0] for _ in range(3)]
    for i, model in enumerate(models):
        for parameter in model.parameters():
            parameter.data.mul_(1 + 0.1 * i)  # three different models
    params, buffers = torch.func.stack_module_state(models)
    x = torch.randn(9, 2, models[0].input_size, dtype=torch.float64)

    def loss(params):
        run = torch.func.vmap(lambda p, b: torch.func.functional_call(models[0], (p, b), (x,))[0])
        return run(params, buffers).square().sum()

    grads = torch.func.grad(loss)(params)
    for model in models:
        model(x)[0].square().sum().backward()
    for key, grad in grads.items():
        torch.testing.assert_close(grad, torch.stack([dict(model.named_parameters())[key].grad
                                                      for model in models]), msg=key)


@pytest.mark.skipif(GILR.__doc__ is None, reason="docstrings stripped (python -OO)")
@pytest.mark.parametrize("layer", [GILR, GILRLSTM, SRU, QRNN], ids=lambda layer: layer.__name__)
def test_docstrings_list_every_parameter(layer):
    """The shared Parameters section is filled in, and names each argument of the layer's
    signature once, in its order."""
    doc = inspect.getdoc(layer)
    assert "{parameters}" not in doc
    assert "{options}" not in doc
    section = doc.split("Parameters\n----------\n")[1].split("\n\n")[0]
    documented = [name for line in section.splitlines() if re.match(r"\w", line)
                  for name in line.split(" : ")[0].split(", ")]
    assert documented == list(inspect.signature(layer).parameters)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_reset_parameters(name):
    """A model made on the meta device, materialised by ``to_empty`` and reset, is
    initialised as one made directly: the same parameters from the same seed, and
    the same outputs."""
    torch.manual_seed(1)
    direct = MODELS[name](3, 5, num_layers=2, bidirectional=True)
    model = MODELS[name](3, 5, num_layers=2, bidirectional=True, device="meta")
    model.to_empty(device="cpu")
    torch.manual_seed(1)
    model.reset_parameters()
    for (key, mine), theirs in zip(model.state_dict().items(), direct.state_dict().values(),
                                   strict=True):
        torch.testing.assert_close(mine, theirs, rtol=0, atol=0, msg=key)
    x = torch.randn(7, 2, model.input_size)
    torch.testing.assert_close(model(x)[0], direct(x)[0])
    # As sharding wrappers do it: each module with parameters of its own reset alone.
    model.to_empty(device="cpu")
    torch.manual_seed(1)
    for module in model.modules():
        if module is not model and hasattr(module, "reset_parameters"):
            module.reset_parameters()
    torch.testing.assert_close(model(x)[0], direct(x)[0])
    # torch.nn.LSTM's flatten_parameters, which code written for it calls, changes nothing.
    before = {key: tensor.clone() for key, tensor in model.state_dict().items()}
    assert model.flatten_parameters() is None
    for key, tensor in model.state_dict().items():
        torch.testing.assert_close(tensor, before[key], rtol=0, atol=0, msg=key)


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("steps", [0, 5])
def test_layer_outputs_are_not_views(name, steps):
    """No layer returns a view: wrappers that hook each layer's outputs (FSDP's
    ``fully_shard``) warn of views, since an in-place change to one escapes the hook."""
    model, inputs = make(name)
    x = torch.randn(steps, 2, inputs, dtype=torch.float64)
    state = random_state(model, 2, torch.Generator().manual_seed(0))
    for layer, initial in zip(model.layers, model._split(state, 2), strict=True):
        output, final = layer(x, initial, "auto", None)
        for tensor in flat((output, final)):
            assert not tensor._is_view()
        x = output


@pytest.mark.parametrize("name", ["gilr-lstm", "qrnn-10"])
def test_compile_fullgraph(name):
    """A stack (bidirectional here) compiles into one graph with the same values and
    gradients."""
    model, inputs = make(name, bidirectional=True)
    x = torch.randn(30, 2, inputs, dtype=torch.float64)
    eager, _ = model(x)
    eager_grads = torch.autograd.grad(eager.square().sum(), list(model.parameters()))
    compiled, _ = torch.compile(model, fullgraph=True, backend="aot_eager")(x)
    grads = torch.autograd.grad(compiled.square().sum(), list(model.parameters()))
    torch.testing.assert_close(compiled, eager)
    for mine, theirs in zip(grads, eager_grads, strict=True):
        torch.testing.assert_close(mine, theirs)


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("batch_first", [False, True])
def test_export_with_dynamic_time_and_batch(name, batch_first):
    """torch.export with the time and batch dimensions dynamic (and a state given) gives a
    program that runs at other lengths and batch sizes with the stack's values."""
    model, inputs = make(name, batch_first=batch_first, bidirectional=name == "gilr")
    generator = torch.Generator().manual_seed(3)

    def arguments(steps, batch):
        shape = (batch, steps, inputs) if batch_first else (steps, batch, inputs)
        return (torch.randn(shape, generator=generator, dtype=torch.float64),
                random_state(model, batch, generator))

    steps, batch = torch.export.Dim("steps"), torch.export.Dim("batch")
    x_dims = {0: batch, 1: steps} if batch_first else {0: steps, 1: batch}
    state_dims = torch.utils._pytree.tree_map(lambda _: {1: batch}, arguments(7, 2)[1])
    program = torch.export.export(model, arguments(7, 2), dynamic_shapes=(x_dims, state_dims))
    for case in (arguments(23, 4), arguments(2, 3)):
        for mine, theirs in zip(flat(program.module()(*case)), flat(model(*case)), strict=True):
            torch.testing.assert_close(mine, theirs)
