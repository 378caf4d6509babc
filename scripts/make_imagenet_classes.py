"""Write novelfind/data/imagenet_classes.txt: the 1000 ImageNet class names of MobileNet-V2's
IMAGENET1K_V1 weights, one a line, in the order of the classifier's outputs.

The names are torchvision's (``MobileNet_V2_Weights.IMAGENET1K_V1.meta["categories"]``); importing
torchvision imports torch (~2 s, ~450 MB), so a scan reads this file instead
(``novelfind.labels``). tests/test_labels.py checks the file against torchvision's list.

    python scripts/make_imagenet_classes.py
"""

from __future__ import annotations

from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "novelfind" / "data" / "imagenet_classes.txt"


def categories() -> list[str]:
    import torchvision

    return list(torchvision.models.MobileNet_V2_Weights.IMAGENET1K_V1.meta["categories"])


def main() -> None:
    names = categories()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text("".join(f"{name}\n" for name in names), encoding="utf-8")
    print(f"{len(names)} class names -> {OUT}")


if __name__ == "__main__":
    main()
