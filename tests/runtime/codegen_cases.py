"""Programs the generated-code tests share."""

#: a for loop with a branch in it, a counting while loop, a list output
LOOPY = """
def f(x: torch.Tensor, n: int, flag: bool):
    acc = torch.zeros_like(x)
    for i in range(n):
        if flag:
            acc = acc + torch.relu(x) * i
        else:
            acc = acc - x
    k = 0
    while k < 3:
        acc = torch.tanh(acc)
        k += 1
    return acc, [acc.sum(), x]
"""
