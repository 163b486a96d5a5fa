// codec.cu — (placeholder until the GPU codec lands)
