"""Writing lazystore files: the streaming writer, delta coding against a
base file (which reads the base through a view, so this stage comes after
views), and the snapshot of a state taken for a save in the background."""
