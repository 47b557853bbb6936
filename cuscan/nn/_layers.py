"""The paper's linear recurrent layers, as torch modules over ``cuscan.linear_recurrence``."""

from __future__ import annotations

import math
import numbers

import numpy as np
import torch
from torch import nn

from cuscan import _api


def _scan(decays, impulses, initial_state, method):
    """The recurrence along time (axis 0 of ``(T, B, H)``)."""
    return _api.linear_recurrence(decays, impulses, initial_state, axis=0, method=method)


def _previous(states, initial_state):
    """``states`` shifted one step later in time: ``s[t-1]``, with ``initial_state`` first."""
    first = (torch.zeros_like(states[:1]) if initial_state is None
             else initial_state.unsqueeze(0).expand_as(states[:1]))
    # (cut after joining: a slice of length T - 1 would make torch.export guard on T != 2)
    return torch.cat([first, states])[:states.shape[0]]


class _Stack(nn.Module):
    """Layers of one kind stacked; handles the input layouts, ``method`` and the states.

    Subclasses make their layers with ``_layer(input_size, hidden_size, bias,
    factory)`` (``factory`` the device and dtype). A layer is called with
    time-major ``(T, B, input)``, its initial states (a tuple in the order of
    ``state_names``, None for zeros), ``method`` and the sequences' lengths
    (None when all are ``T``), and returns ``(T, B, hidden)`` and its final
    states, each sequence's after its own last step. States stack along a
    leading layer dimension (``_split`` and ``_join``).
    """

    state_names: tuple[str, ...] = ("h",)

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, *,
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0,
                 bidirectional: bool = False, method: _api.Method = "auto", device=None,
                 dtype=None):
        super().__init__()
        for name, value in (("input_size", input_size), ("hidden_size", hidden_size),
                            ("num_layers", num_layers)):
            _check_count(name, value)
        if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not (
                0 <= dropout <= 1):
            raise ValueError(f"`dropout` must be a number in [0, 1]; got {dropout!r}")
        _api.check_method(method)
        bias = _check_flag("bias", bias)
        batch_first = _check_flag("batch_first", batch_first)
        bidirectional = _check_flag("bidirectional", bidirectional)
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.bias, self.batch_first, self.method = bias, batch_first, method
        self.dropout, self.bidirectional = float(dropout), bidirectional
        directions = 2 if bidirectional else 1
        # Layer i's directions are layers[i * directions:(i + 1) * directions], as the
        # states are ordered in torch.nn.LSTM; each layer after the first reads the
        # concatenated outputs of the directions before it.
        factory = {"device": device, "dtype": dtype}  # as torch.nn modules take them
        self.layers = nn.ModuleList(
            self._layer(input_size if i < directions else directions * hidden_size,
                        hidden_size, bias, factory)
            for i in range(num_layers * directions))

    def _layer(self, input_size: int, hidden_size: int, bias: bool,
               factory: dict) -> nn.Module:
        raise NotImplementedError

    def reset_parameters(self) -> None:
        """Draw every parameter afresh as at construction, in place.

        For example after ``to_empty`` on a model made with ``device="meta"``.
        Each submodule draws only its own parameters, so calling the
        submodules' ``reset_parameters`` one by one, as sharding wrappers
        do, initialises the whole model too.
        """
        for module in self.modules():
            if module is not self and hasattr(module, "reset_parameters"):
                module.reset_parameters()

    def flatten_parameters(self) -> None:
        """Do nothing: the parameters are never packed into one buffer for cuDNN.

        Present so that code written for ``torch.nn.LSTM``, which calls its
        ``flatten_parameters`` after moving or replicating the module, runs
        unchanged.
        """

    def forward(self, inputs, state=None):
        """Run the stack over a sequence.

        Parameters
        ----------
        inputs : Tensor or PackedSequence
            ``(T, B, input_size)``, or ``(B, T, input_size)`` with
            ``batch_first``; ``(T, input_size)`` for one unbatched sequence; or
            a ``torch.nn.utils.rnn.PackedSequence`` of sequences of different
            lengths. On the parameters' device, in their dtype (any floating
            dtype under ``torch.autocast``), as is `state`.
        state : Tensor or tuple, optional
            The initial state: ``(num_layers * directions, B, hidden_size)`` per
            state tensor (see ``state_names``; directions is 2 when
            bidirectional), ``(num_layers * directions, hidden_size)`` for
            unbatched inputs (see :class:`QRNN` for its inputs); zeros when
            omitted. For a PackedSequence, ``B`` runs in the
            order of the sequences before packing, as for ``torch.nn.LSTM``.

        Returns
        -------
        output : Tensor or PackedSequence
            The last layer's outputs, in the layout of `inputs` with
            ``hidden_size`` features (twice that when bidirectional).
        state : Tensor or tuple
            The final state, in the layout of `state`; with a PackedSequence,
            each sequence's state after its own last step.
        """
        is_packed = isinstance(inputs, nn.utils.rnn.PackedSequence)
        if not is_packed and not isinstance(inputs, torch.Tensor):
            raise TypeError(f"expected inputs as a Tensor or a PackedSequence; "
                            f"got {type(inputs).__name__}")
        weight = next(self.parameters())
        _check_like(weight, "inputs", inputs.data if is_packed else inputs)
        for part in _tensors(state):
            _check_like(weight, "the state", part)
        if is_packed:
            padded, lengths = nn.utils.rnn.pad_packed_sequence(inputs)
            output, final = self._run(padded, state, lengths)
            if inputs.sorted_indices is not None:
                output = output.index_select(1, inputs.sorted_indices)
                lengths = lengths[inputs.sorted_indices.cpu()]
            packed = nn.utils.rnn.pack_padded_sequence(output, lengths)
            return inputs._replace(data=packed.data), final
        if inputs.ndim == 2 and inputs.shape[-1] == self.input_size:
            output, final = self._run(inputs.unsqueeze(1), state, None, batched=False)
            return output.squeeze(1), final
        if inputs.ndim != 3 or inputs.shape[-1] != self.input_size:
            order = "(B, T, input_size)" if self.batch_first else "(T, B, input_size)"
            raise ValueError(f"expected inputs of shape {order} or (T, input_size) with "
                             f"input_size {self.input_size}, or a PackedSequence; "
                             f"got shape {tuple(inputs.shape)}")
        x = inputs.transpose(0, 1) if self.batch_first else inputs
        output, final = self._run(x, state, None)
        return (output.transpose(0, 1) if self.batch_first else output), final

    def _run(self, x, state, lengths, batched=True):
        """The stack over time-major ``x``; finals at ``lengths - 1`` when given.

        Not ``batched``: ``x`` holds one sequence as a batch of one, and the states
        in and out have no batch dimension."""
        states = self._split(state, x.shape[1] if batched else None)
        directions = 2 if self.bidirectional else 1
        finals = []
        for index, (layer, initial) in enumerate(zip(self.layers, states, strict=True)):
            direction = index % directions
            if direction == 0:
                if index and self.dropout:  # on the outputs of every layer but the last
                    x = nn.functional.dropout(x, self.dropout, self.training)
                inputs, outputs = x, []
            # The backward direction runs forward over each sequence reversed.
            seen = _reversed(inputs, lengths) if direction else inputs
            output, final = layer(seen, initial, self.method, lengths)
            outputs.append(_reversed(output, lengths) if direction else output)
            finals.append(final)
            if direction == directions - 1:
                x = torch.cat(outputs, dim=-1) if directions > 1 else output
        return x, self._join(finals, batched)

    def _split(self, state, batch: int | None) -> list:
        """Per-layer tuples of initial states (None for zeros) from the stacked layout;
        ``batch`` None for an unbatched state, given a batch of one."""
        if state is None:
            return [(None,) * len(self.state_names)] * len(self.layers)
        layers = len(self.layers)
        shape = (layers, self.hidden_size) if batch is None else (
            layers, batch, self.hidden_size)
        parts = (state,) if len(self.state_names) == 1 else state
        if (not isinstance(parts, (tuple, list)) or len(parts) != len(self.state_names)
                or not all(isinstance(p, torch.Tensor) and p.shape == shape for p in parts)):
            raise ValueError(f"expected the state as {len(self.state_names)} tensor(s) "
                             f"{self.state_names} of shape {shape}; got {_shapes(state)}")
        if batch is None:
            parts = [p.unsqueeze(1) for p in parts]
        return list(zip(*(p.unbind(0) for p in parts), strict=True))

    def _join(self, finals: list, batched: bool):
        """The stacked layout of the layers' final states (the inverse of ``_split``)."""
        joined = tuple(torch.stack(parts) if batched else torch.stack(parts).squeeze(1)
                       for parts in zip(*finals, strict=True))
        return joined[0] if len(joined) == 1 else joined

    def extra_repr(self) -> str:
        options = "".join(f", {name}={getattr(self, name)}" for name in (
            "dropout", "bidirectional") if getattr(self, name))
        bias = "" if self.bias else ", bias=False"
        return (f"{self.input_size}, {self.hidden_size}, num_layers={self.num_layers}{bias}, "
                f"batch_first={self.batch_first}{options}, method={self.method!r}")


def _check_count(name: str, value) -> None:
    """A size or count: a positive integer (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"`{name}` must be an integer; got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"`{name}` must be at least 1; got {value}")


def _check_flag(name: str, value) -> bool:
    """A switch as a bool: given as one (Python's or NumPy's), or as 0 or 1."""
    if isinstance(value, (bool, np.bool_)) or (
            isinstance(value, numbers.Integral) and value in (0, 1)):
        return bool(value)
    shown = repr(value) if value is None or isinstance(value, (numbers.Number, str)) \
        else type(value).__name__
    raise TypeError(f"`{name}` must be a bool; got {shown}")


def _check_like(weight, what: str, tensor) -> None:
    """``tensor`` on ``weight``'s device and in its dtype (any floating dtype under
    autocast, which casts as it goes), as the layers' products need."""
    if tensor.device != weight.device:
        raise ValueError(f"expected {what} on the parameters' device, {weight.device}; "
                         f"got a tensor on {tensor.device}")
    if tensor.dtype == weight.dtype or (tensor.dtype.is_floating_point
                                        and torch.is_autocast_enabled(tensor.device.type)):
        return
    other = f", or the model with .to({tensor.dtype})" if tensor.dtype.is_floating_point else ""
    raise ValueError(f"expected {what} in the parameters' dtype, {weight.dtype} (any "
                     f"floating dtype under torch.autocast); got {tensor.dtype}: convert "
                     f"with .to({weight.dtype}){other}")


def _tensors(state) -> list:
    """The tensors in a state, nested as it may be; the rest is left to ``_split``."""
    if isinstance(state, torch.Tensor):
        return [state]
    if isinstance(state, (tuple, list)):
        return [t for part in state for t in _tensors(part)]
    return []


def _shapes(state) -> str:
    """The shapes in a state, for messages: nested as the state is, types for the rest."""
    if isinstance(state, torch.Tensor):
        return str(tuple(state.shape))
    if isinstance(state, (tuple, list)):
        return f"[{', '.join(map(_shapes, state))}]"
    return type(state).__name__


def _reversed(x, lengths):
    """Time-major ``x`` reversed in time; with ``lengths``, each sequence within its own
    length (the padding after it stays in place). Its own inverse."""
    if lengths is None:
        return x.flip(0)
    steps = torch.arange(x.shape[0], device=x.device)[:, None]
    lengths = lengths.to(x.device)[None, :]
    index = torch.where(steps < lengths, lengths - 1 - steps, steps)
    return x.gather(0, index[..., None].expand_as(x))


def _final(sequence, initial, lengths):
    """The state after the last step: ``initial`` (or zeros) for an empty sequence,
    and each sequence's own last step when ``lengths`` are given.

    Never a view: wrappers such as FSDP's hook a layer's outputs, and warn of views.
    """
    if lengths is not None:
        steps = (lengths - 1).to(sequence.device)
        return sequence[steps, torch.arange(sequence.shape[1], device=sequence.device)]
    if sequence.shape[0] != 0:
        return sequence[-1].clone()
    return sequence.new_zeros(sequence.shape[1:]) if initial is None else initial.clone()


_PARAMETERS = """Parameters
    ----------
    input_size, hidden_size : int
        Features in and out.
    num_layers : int, default 1
        Layers stacked; each after the first reads the previous one's outputs.
{options}    bias : bool, default True
        Whether the layers' linear maps (and a QRNN's convolutions) add biases;
        with False they have weights alone, as ``torch.nn.LSTM(bias=False)``.
    batch_first : bool, default False
        Inputs and outputs are ``(B, T, features)`` instead of ``(T, B, features)``.
    dropout : float, default 0
        Dropout on the outputs of every layer but the last, in training, as in
        ``torch.nn.LSTM``.
    bidirectional : bool, default False
        Each layer also runs backward in time, with its own weights; its
        outputs are the two directions' concatenated (``2 * hidden_size``
        features) and the states have ``2 * num_layers`` entries, ordered as
        ``torch.nn.LSTM``'s (layer, then direction).
    method : {"auto", "serial", "parallel"}, default "auto"
        How ``cuscan.linear_recurrence`` runs; the numbers agree to rounding.
    device, dtype : optional
        Where and in which dtype the parameters are made, as for ``torch.nn``
        modules (``device="meta"`` makes them without memory)."""


def _documented(options: str = ""):
    """A class decorator: the stacks' shared Parameters section where the class's
    docstring says ``{parameters}``, with ``options``, the class's own entries, after
    `num_layers` (as in its signature)."""
    def document(cls):
        if cls.__doc__ is not None:  # None under python -OO
            cls.__doc__ = cls.__doc__.replace(
                "{parameters}", _PARAMETERS.replace("{options}", options))
        return cls
    return document


class _GILRLayer(nn.Module):
    def __init__(self, input_size: int, hidden_size: int, bias: bool, factory: dict):
        super().__init__()
        # U, V with b_g, b_z
        self.linear = nn.Linear(input_size, 2 * hidden_size, bias=bias, **factory)

    def sequence(self, x, initial, method):
        """``h`` at every step."""
        gate, impulse = self.linear(x).chunk(2, dim=-1)
        gate = torch.sigmoid(gate)
        return _scan(gate, (1 - gate) * torch.tanh(impulse), initial, method)

    def forward(self, x, state, method, lengths):
        h = self.sequence(x, state[0], method)
        return h, (_final(h, state[0], lengths),)


@_documented()
class GILR(_Stack):
    r"""Gated impulse linear recurrent layers (Martin & Cundy 2018, section 3.1).

    .. math::

        g_t = \sigma(U x_t + b_g), \quad i_t = \tanh(V x_t + b_z), \quad
        h_t = g_t \odot h_{t-1} + (1 - g_t) \odot i_t

    {parameters}

    Examples
    --------
    >>> import torch
    >>> from cuscan.nn import GILR
    >>> layer = GILR(4, 8, num_layers=2)
    >>> output, h = layer(torch.randn(100, 3, 4))
    >>> output.shape, h.shape
    (torch.Size([100, 3, 8]), torch.Size([2, 3, 8]))
    """

    def _layer(self, input_size, hidden_size, bias, factory):
        return _GILRLayer(input_size, hidden_size, bias, factory)


class _GILRLSTMLayer(nn.Module):
    def __init__(self, input_size: int, hidden_size: int, bias: bool, factory: dict):
        super().__init__()
        self.surrogate = _GILRLayer(input_size, hidden_size, bias, factory)  # V_g, V_j
        # V_{f,i,o,z} with b_{f,i,o,z}, and U_{f,i,o,z}
        self.inputs = nn.Linear(input_size, 4 * hidden_size, bias=bias, **factory)
        self.recurrent = nn.Linear(hidden_size, 4 * hidden_size, bias=False, **factory)

    def forward(self, x, state, method, lengths):
        surrogate_state, cell_state = state
        surrogate = self.surrogate.sequence(x, surrogate_state, method)
        pre = self.inputs(x) + self.recurrent(_previous(surrogate, surrogate_state))
        forget, inp, out, candidate = pre.chunk(4, dim=-1)
        forget = torch.sigmoid(forget)
        c = _scan(forget, torch.sigmoid(inp) * torch.tanh(candidate), cell_state, method)
        h = torch.sigmoid(out) * c
        return h, (_final(surrogate, surrogate_state, lengths),
                   _final(c, cell_state, lengths))


@_documented()
class GILRLSTM(_Stack):
    r"""LSTM layers whose gates read a GILR surrogate of ``h`` (Martin & Cundy 2018).

    The GILR-LSTM of the paper's section 3.2:

    .. math::

        g_t &= \sigma(V_g x_t + b_g), \quad j_t = \tanh(V_j x_t + b_j), \quad
        \tilde h_t = g_t \odot \tilde h_{t-1} + (1 - g_t) \odot j_t \\
        f_t, i_t, o_t &= \sigma(U_{f,i,o} \tilde h_{t-1} + V_{f,i,o} x_t + b_{f,i,o}),
        \quad z_t = \tanh(U_z \tilde h_{t-1} + V_z x_t + b_z) \\
        c_t &= f_t \odot c_{t-1} + i_t \odot z_t, \quad h_t = o_t \odot c_t

    Both recurrences (the surrogate and the cell) are linear, so the whole
    layer is parallel over time. The state is the pair ``(surrogate, cell)``,
    each ``(num_layers, B, hidden_size)`` (``2 * num_layers`` when
    bidirectional).

    {parameters}

    Examples
    --------
    >>> import torch
    >>> from cuscan.nn import GILRLSTM
    >>> output, (surrogate, cell) = GILRLSTM(4, 8)(torch.randn(100, 3, 4))
    >>> output.shape, cell.shape
    (torch.Size([100, 3, 8]), torch.Size([1, 3, 8]))
    """

    state_names = ("surrogate", "cell")

    def _layer(self, input_size, hidden_size, bias, factory):
        return _GILRLSTMLayer(input_size, hidden_size, bias, factory)


class _SRULayer(nn.Module):
    def __init__(self, input_size: int, hidden_size: int, bias: bool, factory: dict):
        super().__init__()
        self.input_size, self.hidden_size = input_size, hidden_size
        # b_f, b_r; drawn first, as the reset of the whole model draws them.
        self.bias = nn.Parameter(torch.empty(2 * hidden_size, **factory)) if bias else None
        self.reset_parameters()
        self.linear = nn.Linear(input_size, 3 * hidden_size, bias=False, **factory)  # W, W_f, W_r
        # The highway needs x in the hidden size: a projection when the sizes differ.
        self.highway = (nn.Identity() if input_size == hidden_size
                        else nn.Linear(input_size, hidden_size, bias=False, **factory))

    def reset_parameters(self):
        """Draw the gates' biases as ``torch.nn.Linear`` draws its own (the weights are
        the ``Linear`` modules', reset by theirs)."""
        bound = 1 / math.sqrt(self.input_size)  # input_size >= 1 (_check_count)
        if self.bias is not None:
            nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x, state, method, lengths):
        candidate, gates = self.linear(x).tensor_split([self.hidden_size], dim=-1)
        forget, reset = torch.sigmoid(
            gates if self.bias is None else gates + self.bias).chunk(2, dim=-1)
        c = _scan(forget, (1 - forget) * candidate, state[0], method)
        h = reset * torch.tanh(c) + (1 - reset) * self.highway(x)
        return h, (_final(c, state[0], lengths),)


@_documented()
class SRU(_Stack):
    r"""Simple recurrent units (Lei et al. 2017), their recurrence computed in parallel.

    .. math::

        \tilde x_t = W x_t, \quad f_t = \sigma(W_f x_t + b_f), \quad
        r_t = \sigma(W_r x_t + b_r) \\
        c_t = f_t \odot c_{t-1} + (1 - f_t) \odot \tilde x_t, \quad
        h_t = r_t \odot \tanh(c_t) + (1 - r_t) \odot x_t

    Where ``input_size != hidden_size`` the highway term uses a learned
    projection of ``x_t``. The state is ``c``.

    {parameters}

    Examples
    --------
    >>> import torch
    >>> from cuscan.nn import SRU
    >>> output, c = SRU(8, 8, num_layers=3, batch_first=True)(torch.randn(2, 50, 8))
    >>> output.shape, c.shape
    (torch.Size([2, 50, 8]), torch.Size([3, 2, 8]))
    """

    state_names = ("c",)

    def _layer(self, input_size, hidden_size, bias, factory):
        return _SRULayer(input_size, hidden_size, bias, factory)


class _QRNNLayer(nn.Module):
    def __init__(self, input_size: int, hidden_size: int, window: int, bias: bool,
                 factory: dict):
        super().__init__()
        self.window = window
        # One causal convolution giving Z, F and O.
        self.conv = nn.Conv1d(input_size, 3 * hidden_size, window, bias=bias, **factory)

    def forward(self, x, state, method, lengths):
        initial, before = state
        steps, batch, features = x.shape
        # The window - 1 inputs before the first step (zeros unless given), then x:
        # step t sees rows t to t + window - 1 of the whole.
        whole = torch.cat([x.new_zeros(self.window - 1, batch, features) if before is None
                           else before, x])
        # torch's convolution refuses an input shorter than its filter: with no steps it
        # convolves one step of zeros and keeps none, so that the (empty) result still
        # depends on the weights, as every other layer's does.
        padded = whole if steps else torch.cat([whole, x.new_zeros(1, batch, features)])
        # (T + window - 1, B, m) -> (B, m, T + window - 1) -> (T, B, 3H)
        pre = self.conv(padded.permute(1, 2, 0)).permute(2, 0, 1)[:steps]
        z, f, o = pre.chunk(3, dim=-1)
        f = torch.sigmoid(f)
        c = _scan(f, (1 - f) * torch.tanh(z), initial, method)
        h = torch.sigmoid(o) * c
        # The inputs the next block's first steps see: the window - 1 before the end
        # (each sequence's own end when lengths are given).
        if lengths is None:
            last = whole[steps:].clone()  # not a view (see _final)
        else:
            rows = lengths.to(x.device) + torch.arange(self.window - 1, device=x.device)[:, None]
            last = whole.gather(0, rows[..., None].expand(-1, -1, features))
        return h, (_final(c, initial, lengths), last)


@_documented(options="""    window : int, default 2
        The width of the convolution over time: step ``t`` reads inputs
        ``t - window + 1`` to ``t``.
""")
class QRNN(_Stack):
    r"""Quasi-recurrent layers with fo-pooling (Bradbury et al. 2017).

    .. math::

        Z = \tanh(W_z * X), \quad F = \sigma(W_f * X), \quad O = \sigma(W_o * X) \\
        c_t = f_t \odot c_{t-1} + (1 - f_t) \odot z_t, \quad h_t = o_t \odot c_t

    where ``*`` is a causal convolution over time of width `window`: step
    ``t`` sees inputs ``t - window + 1`` to ``t``.

    The state is the pair ``(c, inputs)``: ``c`` stacked as in
    :class:`GILR`, and ``inputs`` a tuple with, for each layer (and
    direction), the ``window - 1`` inputs it reads before the first step,
    ``(window - 1, B, features)`` in time order (``(window - 1, features)``
    for an unbatched sequence), where ``features`` is `input_size` for the
    first layer and ``hidden_size`` (twice that when bidirectional) for the
    others. The final state holds the last ``window - 1`` inputs of each
    layer, so that a sequence run in blocks, each starting from the
    previous one's final state, gives what one run gives. The initial state
    may also be ``c`` alone, or omitted: the inputs before the start are then
    zeros. A backward direction reads the inputs after the end instead; its
    entry in ``inputs`` holds those (given) and the first ``window - 1``
    inputs (final), again in time order.

    {parameters}

    Examples
    --------
    >>> import torch
    >>> from cuscan.nn import QRNN
    >>> model = QRNN(4, 8, num_layers=2, window=3)
    >>> x = torch.randn(100, 3, 4)
    >>> output, (c, inputs) = model(x)
    >>> c.shape, [tuple(last.shape) for last in inputs]
    (torch.Size([2, 3, 8]), [(2, 3, 4), (2, 3, 8)])
    >>> first, state = model(x[:60])
    >>> second, _ = model(x[60:], state)
    >>> torch.allclose(torch.cat([first, second]), output, atol=1e-6)
    True
    """

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, *,
                 window: int = 2, bias: bool = True, batch_first: bool = False,
                 dropout: float = 0.0, bidirectional: bool = False,
                 method: _api.Method = "auto", device=None, dtype=None):
        _check_count("window", window)
        # Before the stack makes its layers, which read it (a plain attribute, which a
        # torch module takes before its __init__).
        self.window = window
        super().__init__(input_size, hidden_size, num_layers, bias=bias,
                         batch_first=batch_first, dropout=dropout, bidirectional=bidirectional,
                         method=method, device=device, dtype=dtype)

    def _layer(self, input_size, hidden_size, bias, factory):
        return _QRNNLayer(input_size, hidden_size, self.window, bias, factory)

    def _split(self, state, batch):
        layers = len(self.layers)
        if state is None:
            return [(None, None)] * layers
        c, before = (state, None) if isinstance(state, torch.Tensor) else (
            state if isinstance(state, (tuple, list)) and len(state) == 2 else (None, None))
        batched = () if batch is None else (batch,)
        shape = (layers, *batched, self.hidden_size)
        shapes = [(self.window - 1, *batched, layer.conv.in_channels) for layer in self.layers]
        if not (isinstance(c, torch.Tensor) and c.shape == shape and (before is None or (
                isinstance(before, (tuple, list)) and len(before) == layers and all(
                    isinstance(b, torch.Tensor) and b.shape == s
                    for b, s in zip(before, shapes, strict=True))))):
            raise ValueError(f"expected the state as c of shape {shape}, or the pair "
                             f"(c, inputs) with inputs {layers} tensor(s) of shapes {shapes}; "
                             f"got {_shapes(state)}")
        if batch is None:
            c = c.unsqueeze(1)
            before = None if before is None else [b.unsqueeze(1) for b in before]
        if before is None:
            return [(initial, None) for initial in c.unbind(0)]
        # A backward direction reads its inputs in reverse, those after the end first.
        return [(initial, b.flip(0) if self._backward(index) else b)
                for index, (initial, b) in enumerate(zip(c.unbind(0), before, strict=True))]

    def _join(self, finals, batched):
        c = torch.stack([final[0] for final in finals])
        inputs = tuple(last.flip(0) if self._backward(index) else last
                       for index, (_, last) in enumerate(finals))
        if not batched:
            return c.squeeze(1), tuple(last.squeeze(1) for last in inputs)
        return c, inputs

    def _backward(self, index: int) -> bool:
        """Whether layer ``index`` runs backward in time."""
        return self.bidirectional and index % 2 == 1

    def extra_repr(self) -> str:
        return super().extra_repr() + f", window={self.window}"

