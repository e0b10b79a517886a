"""The classic MNIST training script, written once for torch, runs under braze with only its imports swapped
(`import braze as torch`, ...): a Dataset, a DataLoader over an explicit index order, a small conv net,
Adadelta + StepLR, nll_loss over log_softmax, and torch.save of the state dict. On the same synthetic data and
initial weights (float64) every training loss and test result equals torch's to rtol 1e-9; the script's
dropout is left out because braze's random streams are not torch's."""
from __future__ import annotations

import re

import numpy as np
import pytest

import braze

SCRIPT = '''
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.utils.data import DataLoader, Dataset


class Digits(Dataset):
    def __init__(self, images, labels):
        self.images, self.labels = torch.tensor(images), torch.tensor(labels)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, index):
        return self.images[index], self.labels[index]


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3, 1)
        self.conv2 = nn.Conv2d(4, 8, 3, 1)
        self.fc1 = nn.Linear(72, 16)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.max_pool2d(x, 2)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        return F.log_softmax(self.fc2(x), dim=1)


def train(model, loader, optimizer):
    model.train()
    for data, target in loader:
        optimizer.zero_grad()
        loss = F.nll_loss(model(data), target)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())


def test(model, loader):
    model.eval()
    test_loss, correct = 0.0, 0
    with torch.no_grad():
        for data, target in loader:
            output = model(data)
            test_loss += F.nll_loss(output, target, reduction="sum").item()
            pred = output.argmax(dim=1, keepdim=True)
            correct += pred.eq(target.view_as(pred)).sum().item()
    results.append((test_loss / len(loader.dataset), correct))


model = Net().double()
model.load_state_dict({name: torch.tensor(value) for name, value in initial.items()})
train_loader = DataLoader(Digits(images[:36], labels[:36]), batch_size=8, sampler=order)
test_loader = DataLoader(Digits(images[36:], labels[36:]), batch_size=5)
OPTIMIZER
for epoch in range(1, 4):
    train(model, train_loader, optimizer)
    test(model, test_loader)
    SCHEDULER_STEP
torch.save(model.state_dict(), path)
'''

ADADELTA = ("from torch.optim.lr_scheduler import StepLR\n"
            "optimizer = optim.Adadelta(model.parameters(), lr=1.0)\n"
            "scheduler = StepLR(optimizer, step_size=1, gamma=0.7)", "scheduler.step()")
# the same script with SGD, its learning rate decayed by hand through param_groups as StepLR does
SGD = ("optimizer = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)",
       "optimizer.param_groups[0]['lr'] *= 0.7")


def braze_source(source: str) -> str:
    """The import swap: every `torch` module in an import line becomes the braze module of the same role."""
    source = re.sub(r"^import torch$", "import braze as torch", source, flags=re.M)
    source = re.sub(r"^import torch\.(\S+) as", r"import braze.\1 as", source, flags=re.M)
    return re.sub(r"^from torch\.(\S+) import", r"from braze.\1 import", source, flags=re.M)


def inputs(tmp_path, name):
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 4, 48)
    images = rng.standard_normal((48, 1, 10, 10)) * 0.5
    images[np.arange(48), 0, labels * 2, :] += 1.5  # a learnable stripe per class
    shapes = {"conv1.weight": (4, 1, 3, 3), "conv1.bias": (4,), "conv2.weight": (8, 4, 3, 3), "conv2.bias": (8,),
              "fc1.weight": (16, 72), "fc1.bias": (16,), "fc2.weight": (4, 16), "fc2.bias": (4,)}
    initial = {k: rng.standard_normal(s) * (1.0 / np.sqrt(np.prod(s[1:]) if len(s) > 1 else 4)) for k, s in
               shapes.items()}
    order = rng.permutation(36).tolist()
    return {"images": images, "labels": labels, "initial": initial, "order": order, "losses": [], "results": [],
            "path": str(tmp_path / f"{name}.pt")}


def run(source, namespace):
    exec(compile(source, "<mnist script>", "exec"), namespace)
    return namespace


def run_both(tmp_path, optimizer):
    torch = pytest.importorskip("torch")
    torch.set_default_dtype(torch.float32)
    source = SCRIPT.replace("OPTIMIZER", optimizer[0]).replace("SCHEDULER_STEP", optimizer[1])
    theirs = run(source, inputs(tmp_path, "torch"))
    ours = run(braze_source(source), inputs(tmp_path, "braze"))
    return ours, theirs


def check_same_run(ours, theirs):
    assert len(ours["losses"]) == len(theirs["losses"]) == 15
    np.testing.assert_allclose(ours["losses"], theirs["losses"], rtol=1e-9)
    assert [c for _, c in ours["results"]] == [c for _, c in theirs["results"]]
    np.testing.assert_allclose([l for l, _ in ours["results"]], [l for l, _ in theirs["results"]], rtol=1e-9)
    assert ours["losses"][-1] < ours["losses"][0]
    saved, reference = braze.load(ours["path"]), braze.load(theirs["path"])  # braze's file and torch's .pt
    assert list(saved) == list(reference)
    for key in saved:
        np.testing.assert_allclose(np.asarray(saved[key]), np.asarray(reference[key]), rtol=1e-8, atol=1e-12)


def test_import_swap_only_touches_imports():
    swapped = braze_source(SCRIPT)
    assert "import braze as torch\nimport braze.nn as nn\nimport braze.nn.functional as F\n" in swapped
    assert "from braze.utils.data import DataLoader, Dataset" in swapped and "torch.flatten(x, 1)" in swapped
    assert braze_source(ADADELTA[0]).startswith("from braze.optim.lr_scheduler import StepLR\n")


def test_mnist_script_with_adadelta_and_steplr_matches_torch(tmp_path):
    check_same_run(*run_both(tmp_path, ADADELTA))


def test_mnist_script_with_sgd_matches_torch(tmp_path):
    check_same_run(*run_both(tmp_path, SGD))

