"""ResNet-18 (BasicBlock) and ResNet-50 (Bottleneck, stride on the 3x3 as in v1.5).

``small_input`` swaps the 7x7/2 stem and max-pool for one 3x3/1 conv, the usual layout for
32x32 images, where the ImageNet stem would shrink the image to 8x8 before the first stage.
"""

from __future__ import annotations

import torch
from torch import nn

LAYOUTS = {18: ("basic", (2, 2, 2, 2)), 50: ("bottleneck", (3, 4, 6, 3))}


def _out(size: int, stride: int) -> int:
    # Output size of a 3x3/pad-1 or 1x1/pad-0 conv with this stride: both give ceil(size / stride).
    return (size - 1) // stride + 1


def _conv_flops(cin: int, cout: int, k: int, h: int, w: int) -> int:
    return 2 * cin * cout * k * k * h * w


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin: int, planes: int, stride: int):
        super().__init__()
        self.cin, self.planes, self.stride = cin, planes, stride
        self.conv1 = nn.Conv2d(cin, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = _shortcut(cin, planes, stride)
        nn.init.zeros_(self.bn2.weight)  # each block starts as identity (Goyal et al. 2017)

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + (x if self.downsample is None else self.downsample(x)))

    def forward_flops(self, h: int, w: int) -> tuple[int, int, int]:
        ho, wo = _out(h, self.stride), _out(w, self.stride)
        f = _conv_flops(self.cin, self.planes, 3, ho, wo) + _conv_flops(self.planes, self.planes, 3, ho, wo)
        if self.downsample is not None:
            f += _conv_flops(self.cin, self.planes, 1, ho, wo)
        return f, ho, wo


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, planes: int, stride: int):
        super().__init__()
        self.cin, self.planes, self.stride = cin, planes, stride
        cout = planes * self.expansion
        self.conv1 = nn.Conv2d(cin, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = _shortcut(cin, cout, stride)
        nn.init.zeros_(self.bn3.weight)

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + (x if self.downsample is None else self.downsample(x)))

    def forward_flops(self, h: int, w: int) -> tuple[int, int, int]:
        ho, wo = _out(h, self.stride), _out(w, self.stride)
        cout = self.planes * self.expansion
        f = (_conv_flops(self.cin, self.planes, 1, h, w) + _conv_flops(self.planes, self.planes, 3, ho, wo)
             + _conv_flops(self.planes, cout, 1, ho, wo))
        if self.downsample is not None:
            f += _conv_flops(self.cin, cout, 1, ho, wo)
        return f, ho, wo


def _shortcut(cin: int, cout: int, stride: int):
    if stride == 1 and cin == cout:
        return None
    return nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))


class ResNet(nn.Module):
    def __init__(self, image_size: tuple[int, int], in_channels: int, num_classes: int, layout: int = 18,
                 width: int = 64, small_input: bool = False):
        super().__init__()
        kind, counts = LAYOUTS[layout]
        block_cls = BasicBlock if kind == "basic" else Bottleneck
        self.image_size, self.in_channels, self.width = tuple(image_size), in_channels, width
        self.small_input, self.num_classes = small_input, num_classes
        if small_input:
            self.stem = nn.Sequential(nn.Conv2d(in_channels, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width),
                                      nn.ReLU(inplace=True))
        else:
            self.stem = nn.Sequential(nn.Conv2d(in_channels, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width),
                                      nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1))
        stages, cin = [], width
        for i, n in enumerate(counts):
            planes = width * 2 ** i
            blocks = []
            for j in range(n):
                blocks.append(block_cls(cin, planes, 2 if (i > 0 and j == 0) else 1))
                cin = planes * block_cls.expansion
            stages.append(nn.Sequential(*blocks))
        self.stages = nn.Sequential(*stages)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, num_classes)
        self.features = cin
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stages(self.stem(x))
        return self.fc(torch.flatten(self.pool(x), 1))

    def model_blocks(self) -> list[nn.Module]:
        """Every residual block of every stage, in order."""
        return [block for stage in self.stages for block in stage]

    def flops_per_sample(self) -> float:
        """Training FLOPs per image: 3 x forward, counting convolutions and the classifier.

        A conv costs 2 x Cin x Cout x k^2 FLOPs per output pixel; batch norm, ReLU and pooling
        are not counted (they are not matmuls, and FlopCounterMode doesn't count them either).
        """
        h, w = self.image_size
        if self.small_input:
            f = _conv_flops(self.in_channels, self.width, 3, h, w)
        else:
            h, w = (h + 6 - 7) // 2 + 1, (w + 6 - 7) // 2 + 1
            f = _conv_flops(self.in_channels, self.width, 7, h, w)
            h, w = (h + 2 - 3) // 2 + 1, (w + 2 - 3) // 2 + 1
        for block in self.model_blocks():
            bf, h, w = block.forward_flops(h, w)
            f += bf
        return 3.0 * (f + 2 * self.features * self.num_classes)
