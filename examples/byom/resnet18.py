"""torchvision's ``resnet18`` under rubin, with no adapter, sharded per residual stage under FSDP.

The residual stages ``layer1`` .. ``layer4`` are found automatically as the blocks. Set
``num_classes`` to the data's number of classes: rubin warns when the head is wider than the
data's classes and stops when it is narrower. Needs a torchvision built for the installed torch
(a plain ``pip install torchvision`` may pull another torch; pin the matching pair).

rubin: ``model.import: examples.byom.resnet18:build`` (see resnet18.yaml).
"""


def build(num_classes: int = 1000, **kwargs):
    from torchvision.models import resnet18

    return resnet18(num_classes=num_classes, **kwargs)
