"""Check a machine and a profile before launching, and read engine logs (shell).

Core: `log_analysis` (a startup or crash log -> figures, failures, known issues) and
`findings` (profile x machine facts x knowledge base -> findings with severity and fix).
Shell: `probes` (NVML, docker, /dev/shm, the model directory).
"""
