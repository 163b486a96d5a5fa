#!/usr/bin/env python3
"""Writes en.txt: the English benchmark prompts, one sentence per line.

Deterministic (fixed seed, no input): running it again gives the same file. Sentences come
from hand-written ones (below) and from hand-written templates whose slots are filled from
small vocabularies chosen to make sense together. Numbers are written out in words, as a
TTS front end would read them. Lines are 30 to 110 characters, unique, sorted by no key
(the order is the seeded shuffle), so any prefix of the file is a varied sample.

    python3 make_prompts.py            # rewrites en.txt beside this script
"""

import random
from pathlib import Path

SEED = 20261129
TARGET = 1000
MIN_LEN, MAX_LEN = 30, 110

ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
        "ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen",
        "seventeen", "eighteen", "nineteen"]
TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]


def words(n):
    """0 <= n < 1,000,000 in English words."""
    if n < 20:
        return ONES[n]
    if n < 100:
        return TENS[n // 10] + ("" if n % 10 == 0 else "-" + ONES[n % 10])
    if n < 1000:
        rest = n % 100
        return ONES[n // 100] + " hundred" + ("" if rest == 0 else " and " + words(rest))
    rest = n % 1000
    head = words(n // 1000) + " thousand"
    if rest == 0:
        return head
    return head + (" and " if rest < 100 else " ") + words(rest)


def year(y):
    """A year as it is spoken: 1987 -> nineteen eighty-seven, 2005 -> two thousand and five."""
    if 2000 <= y < 2010:
        return "two thousand and " + ONES[y - 2000] if y > 2000 else "two thousand"
    hi, lo = divmod(y, 100)
    if lo == 0:
        return words(hi) + " hundred"
    return words(hi) + " " + (words(lo) if lo >= 10 else "oh " + ONES[lo])


ORDINALS = ["first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth",
            "ninth", "tenth", "eleventh", "twelfth", "thirteenth", "fourteenth", "fifteenth",
            "sixteenth", "seventeenth", "eighteenth", "nineteenth", "twentieth",
            "twenty-first", "twenty-second", "twenty-third", "twenty-fourth", "twenty-fifth",
            "twenty-sixth", "twenty-seventh", "twenty-eighth", "twenty-ninth", "thirtieth"]

NAMES = ["Anna", "Ben", "Clara", "David", "Elena", "Felix", "Grace", "Hugo", "Iris", "James",
         "Keiko", "Liam", "Maya", "Noah", "Olivia", "Pablo", "Quinn", "Rosa", "Samuel",
         "Tara", "Umar", "Vera", "Wen", "Yusuf", "Zoe", "Mr. Patel", "Dr. Okafor",
         "Mrs. Lindqvist", "Professor Adams", "my grandmother", "our neighbour",
         "the new intern", "my brother", "the captain"]
CITIES = ["Lisbon", "Toronto", "Nairobi", "Osaka", "Denver", "Melbourne", "Edinburgh",
          "Montreal", "Seoul", "Buenos Aires", "Cape Town", "Helsinki", "Vancouver",
          "Dublin", "Singapore", "Prague", "Auckland", "Chicago", "Marseille", "Reykjavik"]
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December"]

HAND_WRITTEN = [
    "Please remember to water the plants while I'm away this weekend.",
    "The museum opens at nine, but the queue usually starts an hour earlier.",
    "Could you pass me the salt? This soup needs a little more flavour.",
    "She laughed so hard that she had to sit down on the kerb.",
    "If the bridge is closed again, we'll take the ferry across the bay.",
    "Honestly, I think the sequel was better than the original film.",
    "The library will be closed on public holidays until further notice.",
    "He folded the letter twice and slipped it under the door.",
    "Don't worry about the dishes; I'll take care of them after dinner.",
    "A gentle breeze carried the smell of fresh bread down the street.",
    "We missed the last train, so we shared a taxi back to the hotel.",
    "The children built a sandcastle with four towers and a moat.",
    "Every morning, the old fisherman checks his nets before sunrise.",
    "Wait... did you hear that? I'm sure someone knocked on the window.",
    "Thank you for calling; your question is important to us.",
    "The recipe says to let the dough rest for at least an hour.",
    "My phone battery died right in the middle of the conversation.",
    "Rain or shine, the farmers' market runs every Saturday morning.",
    "The violinist bowed, and the audience rose to its feet.",
    "It's not the mountain we conquer, but ourselves.",
    "The quick brown fox jumps over the lazy dog.",
    "She sells seashells by the seashore, or so the old rhyme goes.",
    "Peter Piper picked a peck of pickled peppers, and then he sold them.",
    "How much wood would a woodchuck chuck if a woodchuck could chuck wood?",
    "Red lorry, yellow lorry; red lorry, yellow lorry.",
    "The meeting has been moved to the small conference room upstairs.",
    "Let's meet by the fountain in the square, just after lunch.",
    "I can't believe it's already the end of the year!",
    "The lighthouse keeper wrote in his logbook every single night.",
    "Turn off the lights when you leave, and lock the back door too.",
    "According to the map, the trail loops back to the car park.",
    "Our cat refuses to eat anything but the most expensive food.",
    "The storm knocked out power across half of the county.",
    "After years of practice, he finally played the piece without a mistake.",
    "Is this seat taken, or may I sit here for a moment?",
    "The bakery on the corner sells out of croissants by eight.",
    "Good evening, and welcome to tonight's performance.",
    "Please keep your belongings with you at all times.",
    "Mind the gap between the train and the platform.",
    "The committee will announce its decision early next week.",
    "Somewhere in the distance, a dog barked twice and fell silent.",
    "She tied her hair back, rolled up her sleeves, and got to work.",
    "The soup was too hot, the bread was too hard, and the tea was cold.",
    "He whispered, \"Don't look now, but I think we're being followed.\"",
    "\"Are we there yet?\" asked the smallest voice from the back seat.",
    "\"Absolutely not,\" she replied, without even looking up from her book.",
    "The sign read: no swimming, no fishing, and no feeding the ducks.",
    "There are three things I need: coffee, quiet, and a comfortable chair.",
    "The glacier has retreated nearly a kilometre in the last century.",
    "Bees communicate the location of flowers through a kind of dance.",
    "Octopuses have three hearts and blue blood.",
    "The human body contains roughly thirty-seven trillion cells.",
    "Light from the sun takes about eight minutes to reach the earth.",
    "A group of crows is sometimes called a murder.",
    "The Great Barrier Reef can be seen from space.",
    "Honey found in ancient tombs was still perfectly edible.",
    "Sound travels about four times faster in water than in air.",
    "The shortest war in recorded history lasted less than an hour.",
    "Venus spins in the opposite direction to most other planets.",
    "Some bamboo species can grow nearly a metre in a single day.",
    "Why do we always find lost keys in the last place we look?",
    "What would you do if you had a whole free day tomorrow?",
    "Where did you learn to cook like this?",
    "Who left the milk out on the counter all night?",
    "When does the next bus to the airport leave?",
    "Have you seen my umbrella? I'm sure I left it by the door.",
    "Would you rather explore the deep ocean or outer space?",
    "Is it just me, or is it getting colder in here?",
    "Do you know whether the pharmacy is open on Sundays?",
    "How long does it take to walk to the station from here?",
    "What a beautiful morning for a walk along the river!",
    "Congratulations on your new job; you truly deserve it.",
    "Happy birthday! I hope all your wishes come true this year.",
    "Oh no, I think I left the oven on!",
    "Careful, the floor is still wet from the mopping.",
    "Hurry up, or we'll miss the opening scene!",
    "Well done, team; that was our best quarter ever.",
    "Welcome aboard, and thank you for flying with us today.",
    "Warning: the next section of the path is steep and slippery.",
    "Note that the offer ends at midnight on Friday.",
    "In short, the plan is simple, but the timing is everything.",
    "On the other hand, the cheaper option might last just as long.",
    "To be fair, nobody expected the weather to turn so quickly.",
    "By the way, your package was left with the neighbour next door.",
    "As far as I know, the road reopens tomorrow afternoon.",
    "First, unplug the device; then, hold the button for ten seconds.",
    "The password must contain at least twelve characters.",
    "Your call may be recorded for training and quality purposes.",
    "The system will restart automatically in five minutes.",
    "Press one for billing, two for support, or stay on the line.",
    "Your verification code is four, seven, nine, two, one, eight.",
    "The total comes to forty-two dollars and fifty cents.",
    "The train now arriving at platform six is the express to the coast.",
    "Doors are closing; please stand clear of the doors.",
    "The forecast calls for light snow, turning to rain by evening.",
    "Tomorrow will be sunny, with a high of twenty-three degrees.",
    "Traffic is heavy on the ring road because of an accident.",
    "The match was postponed after the pitch flooded overnight.",
    "Scientists have discovered a new species of frog in the rainforest.",
    "The city council approved plans for a new cycling lane.",
    "Local volunteers planted more than two thousand trees last spring.",
    "The festival attracted visitors from over forty countries.",
    "After a long delay, the rocket finally lifted off at dawn.",
    "The old mill by the river has been turned into a small theatre.",
    "Once upon a time, in a village by the sea, there lived a clockmaker.",
    "The dragon yawned, stretched its wings, and went back to sleep.",
    "Nobody knew where the mysterious stranger had come from.",
    "The map was torn, but the mark in the corner was still clear.",
    "At the stroke of midnight, every clock in the house stopped.",
    "The prince traded his crown for a fishing boat and never looked back.",
    "Deep in the forest, the path split into three narrow trails.",
    "The robot tilted its head and asked, \"What is a sandwich?\"",
    "The wizard's hat was three sizes too big and covered his eyes.",
    "Far below, the city lights flickered like a field of fireflies.",
    "Keep your eyes on the road and your hands on the wheel.",
    "Knowledge speaks, but wisdom listens.",
    "A journey of a thousand miles begins with a single step.",
    "The best time to plant a tree was twenty years ago; the second best is now.",
    "Actions speak louder than words, but words still matter.",
    "Every cloud has a silver lining, even the stormy ones.",
    "Measure twice and cut once, as my grandfather always said.",
    "Don't count your chickens before they hatch.",
    "Fortune favours the bold, but it also favours the prepared.",
    "You can't pour from an empty cup, so take care of yourself.",
    "The early bird catches the worm, but the second mouse gets the cheese.",
    "I'd like a table for two by the window, if that's possible.",
    "Could we have the bill, please? Everything was delicious.",
    "I'll have the vegetable curry, with rice instead of bread.",
    "Is there anything on the menu without nuts? My son is allergic.",
    "Would you like your receipt in the bag or with you?",
    "We're out of oat milk, but we have almond or soy.",
    "Sorry, that size is sold out; shall I order one for you?",
    "The fitting rooms are at the back, just past the shoes.",
    "Let me check whether we have that in stock.",
    "Your appointment is confirmed for Thursday at half past two.",
    "The dentist is running about fifteen minutes late today.",
    "Please fill in this form and bring it back to the front desk.",
    "Take one tablet twice a day, with food, for seven days.",
    "Drink plenty of water and get as much rest as you can.",
    "Stretch before you run, and cool down slowly afterwards.",
    "Breathe in for four seconds, hold for seven, and breathe out for eight.",
    "Close your eyes, relax your shoulders, and let your thoughts drift.",
    "The chapter ends with a question that the book never answers.",
    "His handwriting was so small that I needed a magnifying glass.",
    "The poem has fourteen lines and a surprising final couplet.",
    "We read the novel aloud, one chapter each night.",
    "The painting hung upside down for weeks before anyone noticed.",
    "The choir rehearsed the same four bars for an entire hour.",
    "The drummer counted in, and the whole band started at once.",
    "She hummed the tune all afternoon without knowing its name.",
    "The concert hall fell silent as the conductor raised his baton.",
    "Jazz was playing softly from a radio in the kitchen.",
    "The goalkeeper dived to the left, but the ball went right.",
    "They won the final by a single point in extra time.",
    "The marathon route passes every bridge in the city.",
    "She swam across the lake and back before breakfast.",
    "The chess game lasted five hours and ended in a draw.",
    "Our team finished third, which was better than anyone expected.",
    "I've been learning Spanish for a year, and I still mix up my verbs.",
    "The exam is on Tuesday, so I'll be studying all weekend.",
    "The teacher wrote a single word on the board: why?",
    "Homework is due at the start of class, not the end.",
    "The lecture covered everything from volcanoes to tectonic plates.",
    "Please switch your phones to silent before the lecture begins.",
    "The experiment failed three times before it finally worked.",
    "Always label your samples before putting them in the freezer.",
    "The results were surprising, but the method was sound.",
    "We need more data before we can draw any conclusions.",
    "The spreadsheet crashed just before I pressed save.",
    "Restart the router, wait a minute, and then try again.",
    "The update fixed the bug, but it introduced two new ones.",
    "Remember to back up your files at least once a week.",
    "The printer is jammed again; does anyone know how to fix it?",
    "The new laptop is lighter, faster, and surprisingly quiet.",
    "The kettle clicked off, and the kitchen filled with steam.",
    "Someone has eaten the last biscuit and left the empty packet.",
    "The washing machine makes a strange noise on the spin cycle.",
    "We painted the hallway a pale green, and it looks much bigger.",
    "The garden gate squeaks, so I'll oil the hinges tomorrow.",
    "My grandmother's recipe calls for a pinch of nutmeg.",
    "The tomatoes are finally turning red on the vine.",
    "Autumn leaves crunched under our boots as we walked.",
    "The first frost of the year covered the fields in silver.",
    "Waves crashed against the rocks, sending spray high into the air.",
    "The desert is cold at night, even after the hottest days.",
    "A rainbow appeared just as the last of the rain stopped.",
    "The river froze so thick that people skated across it.",
    "Thunder rolled across the valley long after the lightning.",
]


def pick(rng, xs):
    return xs[rng.randrange(len(xs))]


def cap(s):
    return s[0].upper() + s[1:]


# Each template is a function of the generator returning one sentence.

def t_flight(r):
    return (f"Flight {pick(r, ['B', 'K', 'T', 'Q'])}{pick(r, ['A', 'E', 'L', 'R'])} "
            f"{words(r.randrange(100, 999))} to {pick(r, CITIES)} is now boarding "
            f"at gate {words(r.randrange(1, 60))}.")


def t_delivery(r):
    item = pick(r, ["books", "chairs", "boxes of tea", "plant pots", "lamps", "notebooks",
                    "blankets", "jars of honey", "towels", "candles"])
    return (f"Your order of {words(r.randrange(2, 40))} {item} will arrive on "
            f"{pick(r, WEEKDAYS)} between {words(r.randrange(8, 12))} and "
            f"{words(r.randrange(1, 6))} o'clock.")


def t_recipe(r):
    return (f"Preheat the oven to {words(r.choice(range(160, 240, 10)))} degrees and "
            f"bake the {pick(r, ['bread', 'pie', 'cake', 'lasagne', 'vegetables', 'muffins'])} "
            f"for {words(r.randrange(12, 70))} minutes.")


def t_recipe2(r):
    what, how = pick(r, [
        ("flour", "whisk until smooth"), ("stock", "bring to a gentle boil"),
        ("milk", "stir over a low heat"), ("water", "bring to a boil"),
        ("cream", "whip until it holds its shape"), ("rice", "stir once"),
    ])
    return (f"Add {pick(r, ['two', 'three', 'four'])} cups of {what}, {how}, and "
            f"{pick(r, ['season to taste', 'leave it to cool', 'cover with a lid', 'serve at once'])}.")


def t_weather(r):
    sky = pick(r, ["Clouds will clear", "Showers will move in", "Fog will lift",
                   "Winds will pick up", "Temperatures will drop", "The sun will come out"])
    when = pick(r, ["by mid-morning", "this afternoon", "early this evening", "after lunch",
                    "overnight", "around noon"])
    rest = pick(r, [f"with a high of {words(r.randrange(2, 35))} degrees",
                    f"and lows near {words(r.randrange(0, 15))} degrees",
                    "so take a jacket if you're heading out",
                    f"across most of {pick(r, ['the north', 'the coast', 'the valley', 'the region'])}"])
    return f"{sky} {when}, {rest}."


def t_directions(r):
    return (f"Turn {pick(r, ['left', 'right'])} at the "
            f"{pick(r, ['bakery', 'church', 'petrol station', 'second roundabout', 'traffic lights', 'old oak tree'])}, "
            f"then walk {words(r.randrange(2, 9))} blocks to the "
            f"{pick(r, ['library', 'post office', 'harbour', 'cinema', 'town hall', 'park gates'])}.")


def t_history(r):
    y = r.randrange(1820, 2009)
    what = pick(r, ["the bridge was finished", "the first school opened",
                    "the railway reached the town", "the concert hall reopened",
                    "the harbour was rebuilt", "the market moved to the square",
                    "the observatory was built", "the old town hall was restored"])
    return f"In {year(y)}, {what} after {words(r.randrange(2, 15))} years of work."


def t_birthday(r):
    return (f"{cap(pick(r, NAMES))} was born on the {pick(r, ORDINALS[:28])} of {pick(r, MONTHS)}, "
            f"{year(r.randrange(1930, 2009))}.")


def t_score(r):
    team = pick(r, ["The home side", "The visitors", "Our under-twelves", "The champions",
                    "The underdogs", "The local club"])
    a = r.randrange(1, 7)
    b = r.randrange(0, a)
    return f"{team} won {words(a)} to {words(b)}, with a late goal from {pick(r, NAMES)}."


def t_stats(r):
    who, what = pick(r, [
        ("of the people we surveyed", "said they would come back next year"),
        ("of all visitors", "arrived by bicycle or on foot"),
        ("of the students", "preferred the morning sessions"),
        ("of the new homes", "have solar panels on the roof"),
        ("of the runners", "had never finished a marathon before"),
        ("of our readers", "asked for more recipes"),
        ("of the residents", "asked for more green space"),
    ])
    return f"About {words(r.randrange(11, 96))} percent {who} {what}."


def t_price(r):
    d, c = r.randrange(2, 300), r.choice([0, 5, 10, 25, 49, 50, 75, 99])
    money = f"{words(d)} dollars" + (f" and {words(c)} cents" if c else "")
    thing = pick(r, ["The concert tickets cost", "A monthly pass costs", "The repair came to",
                     "The hotel charges", "The whole meal cost", "The new headphones cost"])
    return f"{thing} {money}, including tax."


def t_time(r):
    h = r.randrange(1, 13)
    m = r.choice(["o'clock", "fifteen", "thirty", "forty-five", "ten", "twenty", "fifty"])
    t = f"{words(h)} {m}" if m != "o'clock" else f"{words(h)} o'clock"
    ev = pick(r, ["The film starts at", "The shop closes at", "Breakfast is served until",
                  "The last ferry leaves at", "The tour begins at", "Check-out is at",
                  "The alarm is set for", "The parade starts at"])
    return f"{ev} {t}, so please don't be late."


def t_phone(r):
    digits = ", ".join(ONES[r.randrange(10)] for _ in range(r.randrange(4, 7)))
    return f"{pick(r, ['Your reference number is', 'The extension is', 'The room code is', 'Your ticket number is'])} {digits}."


def t_story(r):
    who = pick(r, NAMES)
    act = pick(r, ["opened the old trunk", "climbed the hill", "found a key in the snow",
                   "picked up the phone", "walked into the empty station",
                   "looked out of the window", "unfolded the map", "lit the last candle"])
    then = pick(r, ["and smiled for the first time in days",
                    "and realised something was missing",
                    "but nobody else seemed to notice",
                    "and heard a faint melody from somewhere below",
                    "just as the clock struck twelve",
                    "and decided it was finally time to leave",
                    "while the rain kept falling outside"])
    return f"{cap(who)} {act} {then}."


def t_dialogue(r):
    line = pick(r, ["I told you it would work", "We should have left an hour ago",
                    "Nobody touches the cake until tonight", "That's the best news all week",
                    "Let's try it one more time", "I'm not sure this is the right road",
                    "You'll never guess who called", "Keep going, we're nearly there"])
    how = pick(r, ["said", "shouted", "whispered", "muttered", "laughed", "sighed"])
    return f"\"{line},\" {how} {pick(r, NAMES)}."


def t_question(r):
    q = pick(r, ["Have you ever", "Would you like to", "Do you remember when we tried to",
                 "Did you really", "Why would anyone want to", "How hard can it be to"])
    a = pick(r, ["sleep under the stars", "learn the accordion", "cross the desert by camel",
                 "bake bread from scratch", "swim in a frozen lake", "build a boat in the garden",
                 "climb the tallest tower in town", "cook dinner for twenty people",
                 "walk the whole coast path", "grow pumpkins on the balcony"])
    return f"{q} {a}?"


def t_animal(r):
    a, fact = pick(r, [
        ("Elephants", "can recognise themselves in a mirror"),
        ("Dolphins", "sleep with one half of their brain at a time"),
        ("Owls", "can turn their heads most of the way around"),
        ("Penguins", "often give pebbles to the partners they court"),
        ("Sea otters", "hold hands so they don't drift apart while sleeping"),
        ("Hummingbirds", "are the only birds that can fly backwards"),
        ("Cows", "have best friends and get stressed when apart"),
        ("Ants", "can carry many times their own body weight"),
        ("Koalas", "sleep for up to twenty hours a day"),
        ("Snails", "can sleep for as long as three years"),
        ("Crows", "can remember the faces of people who were unkind to them"),
        ("Giraffes", "need only a few hours of sleep each day"),
    ])
    tail = pick(r, ["which still surprises scientists", "according to recent studies",
                    "or so the documentary claimed", "as far as we know"])
    return f"{a} {fact}, {tail}."


def t_instruction(r):
    return (f"{pick(r, ['First', 'To begin', 'Before anything else'])}, "
            f"{pick(r, ['remove the cover', 'unplug the machine', 'empty the tank', 'open the settings menu', 'loosen the four screws'])}; "
            f"then {pick(r, ['wait thirty seconds', 'press the reset button', 'check the filter', 'tighten the bolts again', 'turn it back on'])}.")


def t_announce(r):
    return (f"Attention, please: the {pick(r, ['swimming pool', 'library', 'gym', 'museum shop', 'north entrance', 'car park'])} "
            f"will close in {words(r.choice([5, 10, 15, 20, 30]))} minutes.")


def t_train(r):
    return (f"The {pick(r, ['eight', 'nine', 'ten', 'eleven', 'seven'])} "
            f"{pick(r, ['fifteen', 'thirty', 'forty-five', 'o five', 'twenty'])} service to "
            f"{pick(r, CITIES)} is delayed by about {words(r.randrange(5, 50))} minutes.")


def t_memory(r):
    where = pick(r, ["at my aunt's farm", "by a lake in the mountains", "in a caravan by the sea",
                     "helping at the family shop", "in a tiny flat above a bakery"])
    return f"When I was {words(r.randrange(5, 17))}, we spent every summer {where}."


def t_plan(r):
    return (f"On {pick(r, WEEKDAYS)} we'll {pick(r, ['visit the castle', 'paint the fence', 'drive to the coast', 'finish the report', 'go to the market', 'clean out the garage'])}, "
            f"and on {pick(r, WEEKDAYS)} we'll {pick(r, ['rest', 'see a film', 'cook for friends', 'go hiking', 'visit grandma', 'read in the park'])}.")


def t_opinion(r):
    return (f"{pick(r, ['In my opinion', 'Frankly', 'To be honest', 'If you ask me', 'Personally'])}, "
            f"{pick(r, ['the second half of the book', 'the new bridge', 'the final episode', 'the extended version', 'the cheaper model', 'the old recipe'])} "
            f"{pick(r, ['is far better than people say', 'was a little disappointing', 'deserves another chance', 'is worth every penny', 'could have been shorter'])}.")


def t_measure(r):
    length = r.randrange(4, 30)
    width = r.randrange(2, length)
    return (f"The {pick(r, ['room', 'garden', 'boat', 'pool', 'barn', 'courtyard'])} is "
            f"{words(length)} metres long and {words(width)} metres wide.")


def t_distance(r):
    what = pick(r, ["The coast path", "The pilgrims' trail", "The canal towpath",
                    "The ridge walk", "The old railway line", "The forest loop"])
    tail = pick(r, ["with a hut every few hours", "and most of it is flat",
                    "though the last part is steep", "with a café at the halfway point"])
    return f"{what} is {words(r.randrange(8, 300))} kilometres long, {tail}."


def t_apology(r):
    what = pick(r, ["delay", "confusion", "noise last night", "late reply",
                    "mix-up with your order"])
    then = pick(r, ["it won't happen again", "we're looking into it now",
                    "thank you for your patience", "let me make it right"])
    return f"I'm sorry for the {what}; {then}."


def t_support(r):
    return (f"Could you tell me your {pick(r, ['account number', 'postcode', 'date of birth', 'order reference', 'email address'])}, "
            f"so I can {pick(r, ['find your booking', 'check the status', 'update your details', 'look into the problem'])}?")


def t_count(r):
    n = r.randrange(3, 120)
    what = pick(r, ["sheep in the field", "boats in the harbour", "people in the queue",
                    "chairs in the hall", "birds on the wire", "lanterns along the path",
                    "steps up to the chapel", "windows on the front of the house"])
    return f"I counted {words(n)} {what}, but I might have missed a few."


def t_age(r):
    return (f"The {pick(r, ['oak tree', 'castle', 'lighthouse', 'clock tower', 'stone bridge', 'vineyard'])} "
            f"is more than {words(r.choice(range(100, 1000, 50)))} years old.")


def t_reminder(r):
    return (f"Don't forget to {pick(r, ['call your mother', 'feed the cat', 'return the library books', 'pay the electricity bill', 'book the dentist', 'buy more coffee'])} "
            f"before {pick(r, WEEKDAYS)}.")


def t_because(r):
    what = pick(r, ["We stayed inside", "The picnic was cancelled", "She took the long way home",
                    "They left work early", "The shop stayed closed", "They postponed the trip"])
    why = pick(r, ["the wind was far too strong", "the road was flooded",
                   "it was a friend's birthday", "nobody had the keys",
                   "the forecast looked grim", "the car would not start"])
    return f"{what} because {why}."


def t_although(r):
    what, but = pick(r, [
        ("the hotel was small", "the view from our room made up for it"),
        ("the hike was long", "nobody wanted to turn back"),
        ("the film was slow", "the ending was worth the wait"),
        ("the tickets were cheap", "our seats were right by the stage"),
        ("the room was cold", "we slept better than we had in weeks"),
        ("the recipe looked simple", "it took us the whole afternoon"),
        ("the lecture was early", "the hall was completely full"),
    ])
    return f"Although {what}, {but}."


def t_list(r):
    items = r.sample(["apples", "bread", "eggs", "cheese", "tomatoes", "rice", "coffee",
                      "lemons", "butter", "spinach", "yoghurt", "onions"], 4)
    return f"We still need {items[0]}, {items[1]}, {items[2]}, and {items[3]}."


def t_exclaim(r):
    return (f"{pick(r, ['Look', 'Listen', 'Quick', 'Wow', 'Come and see', 'Hey'])}! "
            f"{pick(r, ['The kettle is boiling over', 'A deer just crossed the road', 'The fireworks have started', 'The bus is already here', 'It is snowing again', 'There is a rainbow over the hills'])}!")


def t_year_event(r):
    return (f"The {pick(r, ['library', 'festival', 'orchestra', 'football club', 'newspaper', 'bakery'])} "
            f"was founded in {year(r.randrange(1850, 2009))} by a group of "
            f"{words(r.randrange(3, 20))} friends.")


def t_recommend(r):
    return (f"If you're ever in {pick(r, CITIES)}, "
            f"{pick(r, ['try the street food near the harbour', 'visit the botanical gardens', 'take the old tram up the hill', 'walk along the river at sunset', 'see the modern art museum'])}.")


def t_fraction(r):
    part = pick(r, ["a third", "half", "two thirds", "three quarters", "a quarter"])
    rest = pick(r, ["of the class caught the flu last winter",
                    "of the town voted for the new park",
                    "of the audience stayed until the very end",
                    "of the orchard was replanted after the fire",
                    "of the runners came from out of town",
                    "of the pie was gone before dinner"])
    return f"Roughly {part} {rest}."


def t_job(r):
    job, joy = pick(r, [
        ("nurse", "the night shifts, oddly enough"), ("carpenter", "the smell of fresh pine"),
        ("bus driver", "the regulars who wave every morning"),
        ("teacher", "the moment a lesson finally clicks"),
        ("chef", "the rush just before service"), ("gardener", "the first week of spring"),
        ("pilot", "the quiet hour before dawn"), ("librarian", "finding the perfect book for someone"),
    ])
    return (f"{cap(pick(r, NAMES))} has worked as a {job} for {words(r.randrange(2, 40))} "
            f"years and still loves {joy}.")


def t_collection(r):
    who = pick(r, ["My uncle", "My neighbour", "Our teacher", "My sister", "A friend of mine"])
    things = pick(r, ["old postcards", "vinyl records", "teapots", "stamps from islands",
                      "toy trains", "fountain pens", "seashells", "maps of cities"])
    return f"{who} collects {things} and owns more than {words(r.randrange(30, 2000))} of them."


def t_app(r):
    feat = pick(r, ["a dark mode", "offline maps", "shared shopping lists", "voice notes",
                    "a sleep timer", "larger text options"])
    fix = pick(r, ["a crash on start-up", "slow syncing", "missing notifications",
                   "a login problem", "blurry photos"])
    return (f"Version {words(r.randrange(2, 20))} point {words(r.randrange(0, 10))} adds "
            f"{feat} and fixes {fix}.")


def t_cold(r):
    return (f"It was {words(r.randrange(5, 35))} degrees below zero when we "
            f"{pick(r, ['reached the summit', 'left the cabin', 'started the car', 'set up the tent', 'saw the northern lights'])}.")


def t_compare(r):
    a, how, b = pick(r, [
        ("the new train", "twice as fast as", "the old one"),
        ("this tent", "half as heavy as", "the one we used to carry"),
        ("the cathedral", "three centuries older than", "the town hall"),
        ("the new library", "four times the size of", "the old reading room"),
        ("the express bus", "twice as expensive as", "the local one"),
        ("our new kitchen", "half the size of", "the one in the old flat"),
    ])
    return f"{cap(a)} is {how} {b}, {pick(r, ['or so they say', 'believe it or not', 'apparently', 'and it shows'])}."


def t_conditional(r):
    cond, result = pick(r, [
        ("it rains tomorrow", "we'll move the party indoors"),
        ("the shop is still open", "could you pick up some milk"),
        ("you finish early", "come and join us at the park"),
        ("the bus is late again", "I'll ride my bike instead"),
        ("the tickets sell out", "we can always watch it at home"),
        ("you get lost", "just follow the river back to town"),
        ("the baby is asleep", "please keep your voices down"),
    ])
    tail = pick(r, ["", f", {pick(r, ['of course', 'I suppose', 'as usual', 'naturally'])}"])
    return f"If {cond}, {result}{tail}" + ("?" if result.startswith("could") else ".")


def t_floor(r):
    return (f"The {pick(r, ['meeting room', 'canteen', 'archive', 'gym', 'waiting room', 'studio'])} "
            f"is on the {pick(r, ORDINALS[:12])} floor, next to the "
            f"{pick(r, ['lifts', 'stairs', 'kitchen', 'print room', 'reception desk'])}.")


def t_queue(r):
    return (f"You are number {words(r.randrange(2, 40))} in the queue; your call will be "
            f"answered in about {words(r.randrange(2, 25))} minutes.")


def t_exercise(r):
    return (f"Do {words(r.randrange(5, 30))} {pick(r, ['squats', 'push-ups', 'lunges', 'sit-ups', 'star jumps'])}, "
            f"rest for {words(r.choice([10, 15, 20, 30, 45, 60]))} seconds, and repeat "
            f"{words(r.randrange(2, 6))} times.")


def t_sale(r):
    return (f"Everything in the {pick(r, ['garden centre', 'shoe department', 'toy section', 'kitchen aisle', 'book corner'])} "
            f"is {words(r.choice([10, 15, 20, 25, 30, 40, 50]))} percent off until {pick(r, WEEKDAYS)}.")


def t_after(r):
    first = pick(r, ["After the storm passed", "Once the guests had gone", "As soon as the bell rang",
                     "Long after midnight", "Just before sunrise", "Halfway through the film"])
    who = pick(r, NAMES)
    then = pick(r, ["made a pot of tea", "went out to look at the sky", "fell fast asleep",
                    "started writing again", "finally opened the letter", "called home"])
    return f"{first}, {who} {then}."


def t_request(r):
    return (f"Would you mind {pick(r, ['closing the window', 'holding the door', 'turning the music down', 'taking a photo of us', 'watching my bag for a minute', 'speaking a little more slowly'])}, please?")


def t_book(r):
    return (f"Chapter {words(r.randrange(2, 40))} begins with "
            f"{pick(r, ['a wedding that nobody wanted', 'a letter from an old friend', 'a storm at sea', 'a missing painting', 'a knock at the door', 'a train that never arrives'])}.")


TEMPLATES = [t_flight, t_delivery, t_recipe, t_recipe2, t_weather, t_directions, t_history,
             t_birthday, t_score, t_stats, t_price, t_time, t_phone, t_story, t_dialogue,
             t_question, t_animal, t_instruction, t_announce, t_train, t_memory, t_plan,
             t_opinion, t_measure, t_distance, t_apology, t_support, t_count, t_age,
             t_reminder, t_because, t_although, t_list, t_exclaim, t_year_event,
             t_recommend, t_fraction, t_job, t_collection, t_app, t_cold, t_compare,
             t_conditional, t_floor, t_queue, t_exercise, t_sale, t_after, t_request, t_book]


def main():
    rng = random.Random(SEED)
    seen = set()
    lines = []

    def add(s):
        s = " ".join(s.split())
        if MIN_LEN <= len(s) <= MAX_LEN and s.lower() not in seen:
            seen.add(s.lower())
            lines.append(s)
            return True
        return False

    for s in HAND_WRITTEN:
        if not add(s):
            raise SystemExit(f"hand-written line rejected (length or duplicate): {s!r}")
    # Round-robin over the templates, one new line each per round, so that each
    # contributes about equally (a template whose combinations run out drops out).
    live = list(TEMPLATES)
    while len(lines) < TARGET and live:
        for t in list(live):
            if len(lines) >= TARGET:
                break
            if not any(add(t(rng)) for _ in range(200)):
                live.remove(t)
    rng.shuffle(lines)
    out = Path(__file__).with_name("en.txt")
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    mean = sum(map(len, lines)) / len(lines)
    print(f"{len(lines)} lines, mean {mean:.1f} chars, "
          f"min {min(map(len, lines))}, max {max(map(len, lines))} -> {out}")


if __name__ == "__main__":
    main()
