"""What the machine is. The only package that touches torch.cuda, NVML and nvidia-smi."""
