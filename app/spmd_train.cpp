// spmd-train: placeholder until the training loop lands.
int main() { return 0; }
