"""Card types: discovery from node labels and allocatable, the cluster-wide catalog, and the card
annotations (capacity-card design).

Queues grant quota per card type name (``volcano.sh/card.quota``), pods choose card types with
``volcano.sh/card.name`` (``A|B`` = A preferred, else B) and PodGroups pre-declare their need with
``volcano.sh/card.request``.

* :mod:`.card_type`: a card type and the naming constants;
* :mod:`.names`: card type names and ``A|B`` alternatives;
* :mod:`.amounts`: the ``card.quota`` and ``card.request`` annotations;
* :mod:`.discovery`: the card types of one node;
* :mod:`.catalog`: the cluster-wide map between card type names and resources.
"""
