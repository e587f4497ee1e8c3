"""Datasets: synthetic (images, vectors, tokens), digits, image folders, CIFAR-10 pickles, token files."""
