"""Queueing GPU servers through Kueue: which pools queue where (``rules``), what a Workload's state
means for the user (``status``), the pools' queue figures (``pools``); ``kube`` reads Kueue's objects."""
