"""Azure Storage Queues: queue names, the hint codec, SAS signing, the put transport and the
SDK-side calls (counts, receive/delete/release for claimWork, sweeping unused queues)."""
