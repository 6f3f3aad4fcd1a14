"""Many hosts on one machine (network, IPC and mount namespaces) against one cluster."""
