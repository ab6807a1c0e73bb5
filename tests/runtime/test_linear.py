"""The few-row CPU path of `runtime.linear`: the values of F.linear, for every shape the models use."""
import pytest
import torch
import torch.nn.functional as F

from runtime.linear import SKINNY_ROWS, Linear, linear, use_skinny


@pytest.mark.parametrize("shape", [(1, 1), (1, 2), (1, 5), (2, 3), (1, SKINNY_ROWS), (3, 7), (1, 64)])
@pytest.mark.parametrize("bias", [False, True])
def test_linear_matches_f_linear(shape, bias):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(*shape, 48, generator=g)
    w, b = torch.randn(40, 48, generator=g), torch.randn(40, generator=g) if bias else None
    out = linear(x, w, b)
    assert out.shape == (*shape, 40) and out.is_contiguous()
    torch.testing.assert_close(out, F.linear(x, w, b), rtol=1e-5, atol=1e-5)


def test_few_rows_take_the_other_product_and_can_be_turned_off():
    g = torch.Generator().manual_seed(1)
    x, w = torch.randn(1, 2, 300, generator=g, dtype=torch.float64), torch.randn(500, 300, generator=g, dtype=torch.float64)
    with use_skinny(False):
        assert torch.equal(linear(x, w), F.linear(x, w))
    assert torch.equal(linear(x, w), (w @ x[0].T).T[None])   # the W @ x^T product, not F.linear's


def test_module_keeps_nn_linear_parameters_and_gradients():
    layer = Linear(6, 4)
    assert isinstance(layer, torch.nn.Linear) and set(layer.state_dict()) == {"weight", "bias"}
    x = torch.randn(1, 6, requires_grad=True)
    layer(x).sum().backward()
    torch.testing.assert_close(x.grad, layer.weight.sum(0, keepdim=True))
